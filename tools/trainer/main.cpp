// zrt-train: the reference trainer. Trains a GPT-2 (model/gpt2.h) on a text file read as bytes,
// data-parallel over every rank of MPI_COMM_WORLD, through the Engine with whatever ZeRO stage,
// precision and optimizer the DeepSpeed config gives. The README's first command and the
// project's end-to-end benchmark (docs/trainer.md).
//   mpirun -np 2 zrt-train --config configs/stage2.json --steps 300
// Checkpoints: --save-dir/--save-every save through Engine::save, --resume continues from the
// latest one (the same losses as a run that never stopped), --init-from takes weights only.
// LoRA: --lora-rank R freezes the base and trains adapters on --lora-targets (model/lora.h);
// with --init-from the base comes from there and the adapters start fresh.
// Live metrics: --metrics-port (or zrt.metrics_port) makes rank 0 serve Prometheus text with
// every rank's figures, gathered once per step (docs/metrics.md).
// Exit status: 0 trained; 2 bad input found before training (flags, config, data file, a model
// that does not fit the device), with a message naming the flag or file; 1 a failure during
// training; 3 stopped by SIGINT/SIGTERM/SIGUSR1 with --save-on-signal, after saving a checkpoint.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "batches.h"
#include "checkpoint_metadata.h"
#include "checkpoints.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi_env.h"
#include "core/config/config.h"
#include "core/build_config.h"
#include "core/device.h"
#if ZRT_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#include "core/cuda/cuda_device.h"
#endif
#include "core/error.h"
#include "core/timing.h"
#include "core/units.h"
#include "hf_weights.h"
#include "json_log.h"
#include "model/blas_core.h"
#include "model/gpt2.h"
#include "core/termination.h"
#include "options.h"
#include "rank_mean.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/engine.h"
#include "runtime/metrics/metrics_report.h"
#include "runtime/metrics/metrics_server.h"
#include "tools/common/progress.h"
#include "step_log.h"
#include "text_data.h"
#include "threads.h"

namespace {

using namespace zrt;
using namespace zrt::trainer;
using Clock = std::chrono::steady_clock;

// Everything a run holds, built before the first step so every input problem is found there.
struct Run {
  Options options;
  std::unique_ptr<comm::MpiCommunicator> comm;
  Config config;
  TextData data;
  Gpt2Shape shape;
  std::string deviceSpec;
  MemoryLedger ledger;
  std::unique_ptr<Device> device;
  // --backend nccl: the model's data goes to NCCL (its stream is the one its collectives order
  // after); the engine's agreements stay on comm. Both outlive the engine.
  std::unique_ptr<Stream> dataStream;
  std::unique_ptr<comm::Communicator> dataComm;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Gpt2> model;
  JsonLog jsonLog;
  std::uint64_t parameters = 0;
  std::uint64_t trainableParameters = 0;
  LoraConfig lora;
  nlohmann::json metadata;  // what every save records in its manifest (checkpoint_metadata.h)
  std::vector<std::string> adapterNames;  // "<module>/<param>" of every adapter
  int threads = 1;
  std::optional<ResumePoint> resumeFrom;
  std::int64_t startStep = 0;  // steps done before this process: the checkpoint's, else 0
  bool metricsOn = false;      // every rank reports each step; rank 0 serves
  std::unique_ptr<metrics::MetricsServer> metricsServer;
  metrics::RankMetrics lastReport;           // this rank's previous report (for the io rates)
  Clock::time_point lastReportAt = Clock::now();
  bool stopped = false;        // --save-on-signal: the ranks agreed to stop at a step boundary
  int stopSignal = 0;          // the signal this rank received, else the one another rank did
  bool stopSignalHere = false;  // this rank received it
};

// Exit status of a run stopped by a signal after saving (--save-on-signal).
constexpr int kStoppedOnSignal = 3;

// Warmup-and-decay schedules need the run's length; DeepSpeed's "auto" total is the trainer's
// number of steps, which only the trainer knows.
void fillSchedulerLength(Config& c, std::int64_t steps) {
  const bool needsTotal = c.scheduler.type == SchedulerType::WarmupDecayLR ||
                          c.scheduler.type == SchedulerType::WarmupCosineLR;
  if (needsTotal && c.scheduler.total_num_steps == 0) c.scheduler.total_num_steps = steps;
}

// Thrown on a rank whose set-up went well when another rank's did not: that rank prints its own
// error, and this one exits quietly with the same status.
struct PeerSetUpFailed {};

// An error every rank holds with the same message (the Engine's collective checkpoint calls
// agree on their outcome): rank 0 prints it and every rank exits 2.
struct AgreedSetUpError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every rank learns whether any rank failed the set-up done since the last agreement, so a rank
// that cannot read its file or open its log does not leave its peers waiting in the engine's
// collectives (nor in MPI_Finalize) until the communication timeout.
void agree(comm::Communicator& comm, const std::exception_ptr& failure) {
  const double failed = meanOverRanks(comm, {failure ? 1.0 : 0.0})[0];
  if (failure) std::rethrow_exception(failure);
  if (failed > 0) throw PeerSetUpFailed{};
}

// --resume or --init-from, once the engine exists. The Engine's calls are collective and agree:
// every rank throws the same message, which names every difference from the model.
void loadCheckpoint(Run& run, const std::vector<RegisteredName>& names) {
  const Options& o = run.options;
  if (run.resumeFrom) {
    const std::string dir = resumeDirectory(o);
    try {
      run.engine->load(dir, run.resumeFrom->tag);
    } catch (const std::exception& e) {
      throw AgreedSetUpError("--resume " + dir + ": " + e.what());
    }
    return;
  }
  if (o.initFrom.empty()) return;
  try {
    // The adapters may be absent (a base model's weights): they keep their fresh values.
    run.engine->loadWeights(o.initFrom, run.adapterNames, HfNames(names));
  } catch (const std::exception& e) {
    throw AgreedSetUpError("--init-from " + o.initFrom + ": " + e.what());
  }
}

// A checkpoint directory records the model it was saved from and its LoRA settings
// (checkpoint_metadata.h): one of another model (--heads, which no weight's shape shows, as much
// as --hidden) or with other adapters is refused here, naming the field. A file, or a path that
// is no checkpoint, is left to the engine, which reports it with everything else that differs.
void checkRecorded(const Run& run, const std::string& path, const std::string& flag) {
  if (!checkpoint::isDirectory(path)) return;
  std::string dir;
  nlohmann::json metadata;
  try {
    dir = checkpointDirectoryAt(path);
    metadata = checkpointMetadataAt(dir);
  } catch (const std::exception& e) {
    ZRT_THROW(InvalidArgument, flag, " ", path, ": ", e.what());
  }
  checkModelMatches(metadata, run.metadata.at("model"), flag + " " + path, dir);
  checkLoraMatches(metadata, run.lora, flag + " " + path);
}

void setUp(Run& run) {
  const Options& o = run.options;
  run.lora = loraConfigOf(o);
  run.comm = std::make_unique<comm::MpiCommunicator>(MPI_COMM_WORLD);
  run.threads = setThreadsPerRank(MPI_COMM_WORLD);
  const int onNode = rankOnNode(MPI_COMM_WORLD);
  // First what each rank reads alone: the config, the data, the log file, the device.
  std::exception_ptr failure;
  try {
    run.config = loadConfig(o.config, run.comm->size());
    // The communicator was made before the config could be read (its size is the config's
    // world), so the config's timeout reaches it only now; ZRT_COMM_TIMEOUT_S still wins.
    run.comm->useConfigTimeout(run.config.zrt.comm_timeout_s);
    run.comm->useConfigDivergenceTimeout(run.config.zrt.divergence_timeout_s);
    fillSchedulerLength(run.config, o.steps);
    run.shape = Gpt2Shape{o.layers, o.hidden, o.heads, o.seqLen, 256};
    validate(run.shape);
    run.metadata = checkpointMetadata(run.shape, o.seed, run.lora, o.initFrom);
    run.data = loadText(o.data, o.seqLen);
    run.deviceSpec = deviceSpecFor(o, deviceSpec(run.config), onNode, visibleCudaDevices());
    if (o.backend == "nccl" && run.deviceSpec.rfind("cuda", 0) != 0)
      ZRT_THROW(InvalidArgument, "--backend nccl needs the cuda device; the device is ", run.deviceSpec,
                " (from ", o.device.empty() ? "the config's zrt.device" : "--device", ")");
    run.device = makeDevice(run.deviceSpec, run.ledger);
    if (o.resume) {
      run.resumeFrom = findResumePoint(resumeDirectory(o));
      run.startStep = run.resumeFrom->stepsDone;
      checkRecorded(run, resumeDirectory(o), "--resume");
    }
    if (!o.initFrom.empty()) checkRecorded(run, o.initFrom, "--init-from");
    // With --save-on-signal any step may be saved: no later checkpoint may be in the way.
    if (!o.saveDir.empty() && run.comm->rank() == 0)
      checkSaveDir(o.saveDir, o.saveOnSignal ? 1 : o.saveEvery, run.startStep, o.steps);
    const int metricsPort = o.metricsPort >= 0 ? o.metricsPort : run.config.zrt.metrics_port;
    run.metricsOn = metricsPort != 0;
    if (run.metricsOn && run.comm->rank() == 0) {
      const std::string address = o.metricsAddress.empty() ? run.config.zrt.metrics_address : o.metricsAddress;
      run.metricsServer = std::make_unique<metrics::MetricsServer>(address, metricsPort);
    }
    // Before the engine registers its swap directories: the first signal then only asks to stop.
    if (o.saveOnSignal) deferStopSignals();
    if (!o.jsonLog.empty() && run.comm->rank() == 0) run.jsonLog = JsonLog(o.jsonLog);
  } catch (...) {
    failure = std::current_exception();
  }
  agree(*run.comm, failure);

  // The engine agrees on its own set-up (every rank throws if one failed).
  EngineModel registration = gpt2Model(run.shape, o.seed, run.lora);
  std::vector<RegisteredName> names;
  for (const ModuleSpec& m : registration.modules)
    for (const ParamSpec& p : m.params) {
      run.parameters += numelOf(p);
      if (p.trainable) run.trainableParameters += numelOf(p);
      names.push_back({m.name, p.name});
      if (run.lora.enabled() && p.trainable) run.adapterNames.push_back(m.name + "/" + p.name);
    }
#if ZRT_HAVE_NCCL
  if (o.backend == "nccl") {  // collective: every rank joins NCCL here
    run.dataStream = run.device->createStream();
    run.dataComm = std::make_unique<comm::NcclCommunicator>(
        dynamic_cast<CudaDevice&>(*run.device), *run.dataStream, MPI_COMM_WORLD,
        std::chrono::milliseconds(static_cast<std::int64_t>(run.config.zrt.comm_timeout_s * 1000)));
  }
#endif
  run.engine = run.dataComm ? std::make_unique<Engine>(run.config, *run.device, *run.comm, *run.dataComm,
                                                       std::move(registration))
                            : std::make_unique<Engine>(run.config, *run.device, *run.comm, std::move(registration));
  loadCheckpoint(run, names);
  try {
    run.model = std::make_unique<Gpt2>(
        run.shape, Gpt2Options{o.activationCheckpointing, o.checkpointOffload, run.lora}, *run.device,
        static_cast<int>(run.config.train_micro_batch_size_per_gpu));
  } catch (...) {
    failure = std::current_exception();
  }
  agree(*run.comm, failure);
}

// A model too large for the device's capacity fails as OutOfMemory where it is allocated; the
// engine reports its set-up failures on every rank as a PeerError quoting the device's message.
bool outOfMemory(const std::exception& e) {
  return dynamic_cast<const OutOfMemory*>(&e) != nullptr ||
         std::string(e.what()).find("out of device memory") != std::string::npos;
}

// Set in the process zrt-train runs again as, to the kernel set OpenBLAS first chose.
constexpr const char* kBlasFallbackVariable = "ZRT_TRAIN_OPENBLAS_FALLBACK";

// OpenBLAS chose its kernels as this process loaded (blas_core.h). Where it fell back to its SSE3
// ones on a CPU with AVX2 or AVX-512, the program runs again in place, before MPI starts, asking
// for the CPU's own: the same pid, so mpirun sees nothing. A core type the user set stays.
void useTheCpusBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const std::string chosen = blasCoreName();
  const char* better = betterBlasCore(chosen, cpuVectorsHere());
  if (!better) return;
  setenv("OPENBLAS_CORETYPE", better, 1);
  setenv(kBlasFallbackVariable, chosen.c_str(), 1);
  // By its resolved path: exec'd as /proc/self/exe, the process would be named "exe" in ps,
  // pkill and the two-host tests' lookups.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    execv(self, argv);
  }
  // Only on failure: carry on with the kernels chosen (the model warns of them).
  std::fprintf(stderr, "zrt-train: could not run again with OPENBLAS_CORETYPE=%s (%s); continuing "
               "on OpenBLAS's %s kernels\n", better, std::strerror(errno), chosen.c_str());
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kBlasFallbackVariable);
}

void printBanner(const Run& run) {
  const Config& c = run.config;
  const auto tokens = c.train_batch_size * run.shape.seqLen;
  std::printf("zrt-train: GPT-2 %d layers x %d wide, %d heads, T %d, vocab 256: %.3fM parameters, "
              "%.3g model FLOPs per token\n",
              run.shape.layers, run.shape.hidden, run.shape.heads, run.shape.seqLen,
              static_cast<double>(run.parameters) / 1e6, run.model->flopsPerToken());
  std::printf("data %s: %zu training and %zu validation bytes\n", run.data.path.c_str(),
              run.data.trainBytes, run.data.bytes.size() - run.data.trainBytes);
  std::printf("%d ranks, %d OpenMP threads per rank, ZeRO stage %d, %s, device %s; global batch %lld sequences (%lld tokens) = "
              "micro-batch %lld x accumulation %lld x %d ranks\n",
              c.world_size, run.threads, run.engine->stage(), std::string(nameOf(run.engine->precision())).c_str(),
              run.deviceSpec.c_str(), static_cast<long long>(c.train_batch_size),
              static_cast<long long>(tokens), static_cast<long long>(c.train_micro_batch_size_per_gpu),
              static_cast<long long>(c.gradient_accumulation_steps), c.world_size);
  const Options& o = run.options;
  if (run.resumeFrom)
    std::printf("resumed from %s/%s after step %lld\n", resumeDirectory(o).c_str(), run.resumeFrom->tag.c_str(),
                static_cast<long long>(run.startStep));
  if (!o.initFrom.empty()) std::printf("initial weights from %s\n", o.initFrom.c_str());
  const char* fallback = std::getenv(kBlasFallbackVariable);
  if (fallback && std::getenv("OPENBLAS_CORETYPE"))
    std::printf("OpenBLAS: %s kernels (it chose %s for this CPU, which it does not know; zrt-train "
                "ran again with OPENBLAS_CORETYPE=%s)\n",
                blasCoreName().c_str(), fallback, std::getenv("OPENBLAS_CORETYPE"));
  else
    std::printf("OpenBLAS: %s kernels\n", blasCoreName().c_str());
  if (run.lora.enabled())
    std::printf("LoRA: rank %d, alpha %g (scaling %g) on %s; base frozen, %.3fM adapter parameters train "
                "(%.2f%% of %.3fM)\n",
                run.lora.rank, run.lora.alpha, run.lora.scaling(), joinFlagNames(run.lora.targets).c_str(),
                static_cast<double>(run.trainableParameters) / 1e6,
                100.0 * static_cast<double>(run.trainableParameters) / static_cast<double>(run.parameters),
                static_cast<double>(run.parameters) / 1e6);
  std::fflush(stdout);
}

// Every rank's figures for this step, gathered to rank 0, which publishes them. Collective.
void reportMetrics(Run& run, std::int64_t stepsDone, double stepSeconds, double loss, const StepReport& report) {
  metrics::RankMetrics m;
  m.steps = static_cast<double>(stepsDone);
  m.stepSeconds = stepSeconds;
  m.loss = loss;
  m.lossScale = report.lossScale;
  m.lr = report.lr;
  m.commWaitSeconds = report.commSeconds;
  m.ioWaitSeconds = report.ioSeconds;
  metrics::readLedger(run.ledger, m);
  metrics::readCommStats(run.comm->stats(), m);
  metrics::noteInFlight(run.comm->inFlight(), m);
  if (run.dataComm) {  // --backend nccl: the model's data is counted there
    metrics::addCommStats(run.dataComm->stats(), m);
    metrics::noteInFlight(run.dataComm->inFlight(), m);
  }
  if (const comm::Communicator* lane = run.engine->gatherLane()) {
    metrics::addCommStats(lane->stats(), m);
    metrics::noteInFlight(lane->inFlight(), m);
  }
  const auto now = Clock::now();
  if (const auto io = run.engine->ioStats())
    metrics::readIoStats(*io, run.lastReport, std::chrono::duration<double>(now - run.lastReportAt).count(), m);
  run.lastReport = m;
  run.lastReportAt = now;
  const std::vector<metrics::RankMetrics> all = metrics::gatherRankMetrics(*run.comm, m);
  if (run.metricsServer) run.metricsServer->publish(metrics::renderMetrics(all));
}

// Whether any rank has received SIGINT, SIGTERM or SIGUSR1: ranks may get the signal at different
// times, so they agree once per step and stop together. The agreement also says which signal: a
// signal sent to mpirun reaches the ranks one after another, and rank 0, which reports the stop,
// may get its copy only after the others agreed (it then names the signal, "to another rank").
bool stopAgreed(Run& run) {
  const int mine = stopSignal();
  constexpr int kSignals[] = {SIGINT, SIGTERM, SIGUSR1};  // the order a mixed stop is named in
  std::vector<double> flags = {mine != 0 ? 1.0 : 0.0};
  for (int sig : kSignals) flags.push_back(mine == sig ? 1.0 : 0.0);
  const std::vector<double> any = meanOverRanks(*run.comm, flags);
  if (any[0] == 0) return false;
  run.stopped = true;
  run.stopSignalHere = mine != 0;
  run.stopSignal = mine;
  for (std::size_t i = 0; i < std::size(kSignals) && run.stopSignal == 0; ++i)
    if (any[i + 1] > 0) run.stopSignal = kSignals[i];
  return true;
}

// Mean cross-entropy over `batches` global batches of the validation text, from step 0 of the
// sample order, each rank evaluating its share: the same bytes whatever the world size.
double validationLoss(Run& run, const BatchSplit& split, std::vector<std::uint8_t>& in,
                std::vector<std::uint8_t>& target) {
  EngineSource src(*run.engine);
  const int T = run.shape.seqLen;
  double sum = 0;
  for (std::int64_t s = 0; s < run.options.evalBatches; ++s)
    for (std::int64_t m = 0; m < split.accumulation; ++m) {
      fillMicroBatch(run.data.validation(), T, split, s, m, run.comm->rank(), in.data(), target.data());
      sum += run.model->loss(src, in.data(), target.data(), static_cast<int>(split.micro));
    }
  return meanOverRanks(*run.comm, {sum / static_cast<double>(run.options.evalBatches * split.accumulation)})[0];
}

void train(Run& run) {
  const Options& o = run.options;
  const Config& c = run.config;
  const int rank = run.comm->rank();
  const int T = run.shape.seqLen;
  const BatchSplit split{c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps, c.world_size};
  std::vector<std::uint8_t> in(static_cast<std::size_t>(split.micro * T));
  std::vector<std::uint8_t> target(in.size());
  EngineSource src(*run.engine);
  // A terminal gets one line rewritten in place; a log file or pipe gets a line per step.
  const bool startedByMpirun = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK") ||
                               std::getenv("PMIX_RANK");
  const bool terminal = rank == 0 && progressLine(o, isatty(STDOUT_FILENO), startedByMpirun);

  const std::int64_t start = run.startStep;
  if (start >= o.steps) {
    if (rank == 0) std::printf("nothing to train: the checkpoint is after step %lld, --steps is %lld\n",
                               static_cast<long long>(start), static_cast<long long>(o.steps));
    return;
  }
  const auto runStart = Clock::now();
  run.lastReportAt = runStart;  // the first report's io rate covers the first step
  double firstLoss = 0, lastLoss = 0;
  std::optional<double> lastVal;
  // The batches are a function of the step index, so a resumed run picks up the data order
  // where the checkpoint left it.
  for (std::int64_t s = start; s < o.steps; ++s) {
    const auto t0 = Clock::now();
    double loss = 0;
    for (std::int64_t m = 0; m < split.accumulation; ++m) {
      fillMicroBatch(run.data.train(), T, split, s, m, rank, in.data(), target.data());
      run.engine->beginMicroStep();
      loss += run.model->forwardBackward(src, in.data(), target.data(), static_cast<int>(split.micro),
                                         run.engine->gradientSeed());
      run.engine->endMicroStep();
    }
    const StepReport report = run.engine->step();
    // Micro-batches are equal in size, so the mean of their means over micro-steps and ranks is
    // the mean over every token of the global batch.
    loss = meanOverRanks(*run.comm, {loss / static_cast<double>(split.accumulation)})[0];
    const double stepSeconds = secondsSince(t0);

    StepRecord r;
    r.step = s + 1;
    r.steps = o.steps;
    r.loss = loss;
    const bool evaluate = s + 1 == o.steps || (o.evalEvery > 0 && (s + 1) % o.evalEvery == 0);
    if (evaluate) r.valLoss = lastVal = validationLoss(run, split, in, target);
    r.tokensPerSecond = static_cast<double>(c.train_batch_size * T) / stepSeconds;
    r.skipped = !report.taken;
    r.lr = report.lr;
    r.lossScale = report.lossScale;
    r.gradNorm = report.gradNorm;
    r.stepSeconds = stepSeconds;
    r.computeSeconds = report.computeSeconds;
    r.commSeconds = report.commSeconds;
    r.optimizerSeconds = report.optimizerSeconds;
    r.ioSeconds = report.ioSeconds;
    r.etaSeconds = secondsSince(runStart) / static_cast<double>(s + 1 - start) * static_cast<double>(o.steps - s - 1);
    if (s == start) firstLoss = loss;
    lastLoss = loss;
    if (run.metricsOn) reportMetrics(run, s + 1, stepSeconds, loss, report);
    if (rank == 0) {
      if (terminal) {
      // \r and erase-to-end rewrite the progress line; a validation keeps its line on screen.
        std::printf("%s%s%s", tools::kRewriteLine, formatStepLine(r, true).c_str(), evaluate ? "\n" : "");
      } else {
        std::printf("%s\n", formatStepLine(r, false).c_str());
      }
      std::fflush(stdout);
      run.jsonLog.write(stepJson(r));
    }
    const bool stop = o.saveOnSignal && stopAgreed(run);
    if (!o.saveDir.empty() && (stop || savesAfter(s + 1, o.saveEvery, o.steps))) {
      const auto t = Clock::now();
      const std::string tag = tagForStep(s + 1);
      run.engine->save(o.saveDir, tag, run.metadata);
      if (rank == 0) {
        // Below the progress line, which the next step rewrites.
        std::printf("%ssaved %s/%s in %s\n", terminal ? "\n" : "", o.saveDir.c_str(), tag.c_str(),
                    formatDuration(secondsSince(t)).c_str());
        std::fflush(stdout);
      }
    }
    if (stop) {
      if (rank == 0) {
        std::printf("%sstopped by %s%s after step %lld: saved %s/%s; continue with --resume %s\n", terminal ? "\n" : "",
                    run.stopSignal == SIGINT    ? "SIGINT"
                    : run.stopSignal == SIGTERM ? "SIGTERM"
                    : run.stopSignal == SIGUSR1 ? "SIGUSR1"
                                                : "a signal",
                    run.stopSignalHere ? "" : " to another rank", static_cast<long long>(s + 1), o.saveDir.c_str(),
                    tagForStep(s + 1).c_str(), o.saveDir.c_str());
        std::printf("rank 0 memory:\n%s", run.engine->memorySummary().c_str());
        std::fflush(stdout);
      }
      return;
    }
  }
  if (rank == 0) {
    std::printf("trained %lld steps in %s: loss %.4f -> %.4f, validation loss %.4f\n",
                static_cast<long long>(o.steps - start), formatDuration(secondsSince(runStart)).c_str(),
                firstLoss, lastLoss, lastVal.value_or(0.0));
    std::printf("rank 0 memory:\n%s", run.engine->memorySummary().c_str());
    std::fflush(stdout);
    run.jsonLog.write(memoryJson(run.ledger));
  }
}

}  // namespace

int main(int argc, char** argv) {
  useTheCpusBlasKernels(argv);
  comm::MpiEnvironment mpi(&argc, &argv);
  const bool rank0 = mpi.rank() == 0;
  Run run;
  CLI::App app{"zrt-train: trains a GPT-2 on a text file through the ZRT Engine (docs/trainer.md)"};
  addFlags(app, run.options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parsed the same argv; one message is enough.
    if (!rank0) return e.get_exit_code() == 0 ? 0 : 2;
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    checkOptions(run.options);
  } catch (const std::exception& e) {
    if (rank0) std::fprintf(stderr, "zrt-train: %s\n", e.what());
    return 2;
  }
  try {
    setUp(run);
  } catch (const PeerSetUpFailed&) {
    return 2;
  } catch (const AgreedSetUpError& e) {
    if (rank0) std::fprintf(stderr, "zrt-train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // The engine's set-up errors are agreed: every rank holds the same message; one prints it.
    if (dynamic_cast<const PeerError*>(&e) && !rank0) return 2;
    if (outOfMemory(e))
      std::fprintf(stderr,
                   "zrt-train: the model does not fit device %s (its capacity is --device-mem or "
                   "the config's zrt.host_device_memory; lower --layers, --hidden, --seq-len or the "
                   "micro-batch, or use a higher ZeRO stage): %s\n",
                   run.deviceSpec.c_str(), e.what());
    else
      std::fprintf(stderr, "zrt-train: %s\n", e.what());
    return 2;
  }
  try {
    if (rank0) printBanner(run);
    if (rank0 && run.metricsServer)
      std::printf("metrics: http://%s:%d/metrics\n", run.metricsServer->address().c_str(), run.metricsServer->port());
    std::fflush(stdout);
    train(run);
  } catch (const std::exception& e) {
    // A failure here may be this rank's alone, with its peers waiting in a collective: abort the
    // job rather than wait in MPI_Finalize for ranks that will not arrive.
    std::fprintf(stderr, "zrt-train: training failed: %s\n", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  // A log that stops short is lost output: the run finished, but a script reading the log must
  // not take it for the whole run (the first failed write already warned, naming the file).
  run.jsonLog.close();
  if (run.jsonLog.failed()) {
    std::fprintf(stderr, "zrt-train: %s: the log is incomplete\n", run.jsonLog.error().c_str());
    return 1;
  }
  // The run (its engine and swap directories) ends before MPI does, on every path.
  return run.stopped ? kStoppedOnSignal : 0;
}

#include "tools/plan/cli.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/units.h"
#include "tools/plan/config_input.h"
#include "tools/plan/io_result.h"
#include "tools/plan/report.h"
#include "tools/plan/strategy.h"
#include "tools/plan/write_config.h"

namespace zrt::plan {
namespace {

OffloadDevice parseOffload(const std::string& s) {
  if (s == "cpu") return OffloadDevice::Cpu;
  if (s == "nvme") return OffloadDevice::Nvme;
  return OffloadDevice::None;
}

std::uint64_t physicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(size) : 0;
}

// CLI11's PositiveNumber prints the whole double range in its message; these say what is wanted.
const CLI::Validator kWhole(
    [](std::string& v) -> std::string {
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 18 ||
          std::stoull(v) == 0)
        return "expected a whole number of at least 1, got '" + v + "'";
      return {};
    },
    "N>=1");
const CLI::Validator kPositive(
    [](std::string& v) -> std::string {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(d > 0) || !std::isfinite(d))
        return "expected a positive number, got '" + v + "'";
      return {};
    },
    "X>0");
const CLI::Validator kNonNegative(
    [](std::string& v) -> std::string {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(d >= 0) || !std::isfinite(d))
        return "expected a number >= 0, got '" + v + "'";
      return {};
    },
    "X>=0");

std::uint64_t bytesFlag(const std::string& flag, const std::string& value) {
  return parseBytes(value, flag);
}

struct Flags {
  std::string params, manifest, config, writeConfig, nvmeBench, nvmePath = "/local_nvme";
  std::uint64_t layers = 0, hidden = 0, heads = 0, vocab = 0, seqLen = 2048;
  std::uint64_t loraRank = 0;
  std::vector<std::string> loraTargets{"q", "k", "v", "o"};
  int worldSize = 1, nodes = 1, ranksPerNode = 1;
  std::string deviceMem = "80G", hostMem, nvme = "0", reserve = "0";
  double pcieGbps = 25, hostMemGbps = 100, nvmeReadGbps = 3, nvmeWriteGbps = 2, netGbps = 25,
         tflops = 100;
  std::string precision = "fp16", optimizer = "adam";
  double momentum = 0;
  std::uint64_t microBatch = 1, gradAccum = 1;
  int stage = 0;
  std::string offload = "none", offloadParam = "none";
  bool checkpointing = false, pinMemory = false, flashAttention = false;
  bool json = false, explainFlag = false, explainAll = false, detail = false;
};

// The flags whose presence matters, not only their value (given or left at the default).
struct FlagHandles {
  CLI::Option* params = nullptr;
  CLI::Option* layers = nullptr;
  CLI::Option* hidden = nullptr;
  CLI::Option* heads = nullptr;
  CLI::Option* vocab = nullptr;
  CLI::Option* manifest = nullptr;
  CLI::Option* loraRank = nullptr;
  CLI::Option* world = nullptr;
  CLI::Option* nodes = nullptr;
  CLI::Option* rpn = nullptr;
  CLI::Option* hostMem = nullptr;
  CLI::Option* nvmeRead = nullptr;
  CLI::Option* nvmeWrite = nullptr;
  CLI::Option* bench = nullptr;
  CLI::Option* precision = nullptr;
  CLI::Option* optimizer = nullptr;
  CLI::Option* momentum = nullptr;
  CLI::Option* micro = nullptr;
  CLI::Option* accum = nullptr;
  CLI::Option* stage = nullptr;
  CLI::Option* offload = nullptr;
  CLI::Option* offloadParam = nullptr;
  CLI::Option* pin = nullptr;
};

// Every flag of zrt-plan, bound to `f`; the returned handles tell which were given.
FlagHandles addFlags(CLI::App& app, Flags& f) {
  FlagHandles g;
  app.set_help_flag("-h,--help", "Print this help and exit");
  // Model
  g.params = app.add_option("--params", f.params, "Parameter count: 7e9, 7B, 1.3B, 350M");
  g.layers = app.add_option("--layers", f.layers, "Transformer layers L")->check(kWhole);
  g.hidden = app.add_option("--hidden", f.hidden, "Hidden size h")->check(kWhole);
  g.heads = app.add_option("--heads", f.heads, "Attention heads a")->check(kWhole);
  g.vocab = app.add_option("--vocab", f.vocab, "Vocabulary size V")->check(kWhole);
  g.manifest = app.add_option("--manifest", f.manifest, "ZRT checkpoint manifest (JSON; docs/plan.md)");
  app.add_option("--seq-len", f.seqLen, "Sequence length s (default 2048)")->check(kWhole);
  g.loraRank = app.add_option("--lora-rank", f.loraRank, "Consider LoRA adapters of this rank")
      ->check(kWhole);
  app.add_option("--lora-targets", f.loraTargets, "Projections that get adapters (default q,k,v,o)")
      ->delimiter(',');
  g.params->excludes(g.layers)->excludes(g.hidden)->excludes(g.heads)->excludes(g.vocab)->excludes(g.manifest);
  // Hardware
  g.world = app.add_option("--world-size", f.worldSize, "Data-parallel ranks in all")->check(kWhole);
  g.nodes = app.add_option("--nodes", f.nodes, "Nodes")->check(kWhole);
  g.rpn = app.add_option("--ranks-per-node", f.ranksPerNode, "Ranks (devices) per node")->check(kWhole);
  app.add_option("--device-mem", f.deviceMem, "Device memory per rank (default 80G)");
  g.hostMem = app.add_option("--host-mem", f.hostMem, "Host memory per node (default: this machine's)");
  app.add_option("--nvme", f.nvme, "Free NVMe space per node (default 0: no NVMe)");
  app.add_option("--reserve", f.reserve, "Device memory per rank to keep free (default 0)");
  app.add_option("--pcie-gbps", f.pcieGbps, "Host<->device GB/s per rank (default 25)")->check(kPositive);
  app.add_option("--host-mem-gbps", f.hostMemGbps, "Host memory GB/s per node (default 100)")->check(kPositive);
  g.nvmeRead = app.add_option("--nvme-read-gbps", f.nvmeReadGbps, "NVMe read GB/s per node (default 3)")
      ->check(kPositive);
  g.nvmeWrite = app.add_option("--nvme-write-gbps", f.nvmeWriteGbps, "NVMe write GB/s per node (default 2)")
      ->check(kPositive);
  g.bench = app.add_option("--nvme-bench", f.nvmeBench, "zrt-io --json result file: NVMe bandwidth from it");
  g.bench->excludes(g.nvmeRead)->excludes(g.nvmeWrite);
  app.add_option("--net-gbps", f.netGbps, "Network GB/s per rank (default 25)")->check(kPositive);
  app.add_option("--tflops", f.tflops, "Achieved TFLOP/s per rank (default 100)")->check(kPositive);
  // Training
  g.precision = app.add_option("--precision", f.precision, "fp32, fp16 or bf16 (default fp16)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  g.optimizer = app.add_option("--optimizer", f.optimizer, "adam, adamw or sgd (default adam)")
      ->check(CLI::IsMember({"adam", "adamw", "sgd"}));
  g.momentum = app.add_option("--momentum", f.momentum, "SGD momentum (default 0: no momentum buffer)")
      ->check(kNonNegative);
  g.micro = app.add_option("--micro-batch", f.microBatch, "Micro-batch per rank (default 1)")->check(kWhole);
  g.accum = app.add_option("--grad-accum", f.gradAccum, "Gradient accumulation steps (default 1)")->check(kWhole);
  g.stage = app.add_option("--stage", f.stage, "The ZeRO stage used now (default 0)")->check(CLI::Range(0, 3));
  g.offload = app.add_option("--offload", f.offload, "offload_optimizer used now: none, cpu, nvme")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  g.offloadParam = app.add_option("--offload-param", f.offloadParam, "offload_param used now: none, cpu, nvme")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  app.add_flag("--checkpointing", f.checkpointing, "Activation checkpointing is on now");
  app.add_flag("--flash-attention", f.flashAttention,
               "Attention scores are not stored (FlashAttention): drops the 5as/h activation term");
  g.pin = app.add_flag("--pin-memory", f.pinMemory, "Offloaded state in pinned (page-locked) host memory");
  app.add_option("--config", f.config, "DeepSpeed/ZRT config: the current strategy and bucket sizes");
  // Output
  app.add_flag("--json", f.json, "One JSON object instead of the table");
  app.add_flag("--explain", f.explainFlag, "Print the formulas with numbers for the baseline and the recommendation");
  app.add_flag("--explain-all", f.explainAll, "Print the formulas for every strategy");
  app.add_flag("--detail", f.detail, "Print every strategy's bytes by purpose and place");
  app.add_option("--write-config", f.writeConfig, "Write the recommended strategy as a DeepSpeed config");
  app.add_option("--nvme-path", f.nvmePath, "nvme_path written for NVMe offload (default /local_nvme)");
  return g;
}

Hardware hardwareFrom(const Flags& f, const FlagHandles& g) {
  Hardware hw;
  // Ranks: any two of world size, nodes and ranks per node determine the third.
  const bool w = g.world->count() > 0, n = g.nodes->count() > 0, r = g.rpn->count() > 0;
  if (w && r && f.worldSize % f.ranksPerNode != 0)
    ZRT_THROW(InvalidArgument, "--world-size ", f.worldSize, " is not a multiple of --ranks-per-node ", f.ranksPerNode);
  if (w && n && !r && f.worldSize % f.nodes != 0)
    ZRT_THROW(InvalidArgument, "--world-size ", f.worldSize, " is not a multiple of --nodes ", f.nodes);
  if (w && n && r && f.worldSize != f.nodes * f.ranksPerNode)
    ZRT_THROW(InvalidArgument, "--world-size ", f.worldSize, " is not --nodes ", f.nodes, " x --ranks-per-node ",
              f.ranksPerNode);
  hw.worldSize = w ? f.worldSize : (n ? f.nodes : 1) * (r ? f.ranksPerNode : 1);
  hw.ranksPerNode = r ? f.ranksPerNode : (n ? hw.worldSize / f.nodes : hw.worldSize);
  hw.deviceBytes = bytesFlag("--device-mem", f.deviceMem);
  hw.hostBytes = g.hostMem->count() ? bytesFlag("--host-mem", f.hostMem) : physicalMemory();
  hw.nvmeBytes = bytesFlag("--nvme", f.nvme);
  hw.reserveBytes = bytesFlag("--reserve", f.reserve);
  hw.pcieBps = f.pcieGbps * 1e9;
  hw.hostMemBps = f.hostMemGbps * 1e9;
  hw.nvmeReadBps = f.nvmeReadGbps * 1e9;
  hw.nvmeWriteBps = f.nvmeWriteGbps * 1e9;
  hw.nvmeBandwidthSource = (g.nvmeRead->count() || g.nvmeWrite->count()) ? "--nvme-*-gbps" : "assumed";
  if (!f.nvmeBench.empty()) {
    const NvmeBandwidth b = readIoResults(f.nvmeBench);
    hw.nvmeReadBps = b.readBps;
    hw.nvmeWriteBps = b.writeBps;
    hw.nvmeBandwidthSource = b.source;
  }
  hw.netBps = f.netGbps * 1e9;
  hw.flops = f.tflops * 1e12;
  return hw;
}

// The model, from exactly one description (--params, a transformer shape or --manifest), and
// its LoRA variant when --lora-rank asks for one.
void modelFrom(const Flags& f, const FlagHandles& g, PlanInputs& in) {
  const bool anyShape = g.layers->count() || g.hidden->count() || g.heads->count() || g.vocab->count();
  if (anyShape) {
    for (auto [opt, name] : {std::pair{g.layers, "--layers"}, {g.hidden, "--hidden"}, {g.heads, "--heads"},
                             {g.vocab, "--vocab"}}) {
      if (!opt->count())
        ZRT_THROW(InvalidArgument, name, " is missing: a transformer shape needs --layers, --hidden, "
                                         "--heads and --vocab");
    }
  }
  const TransformerShape shape{f.layers, f.hidden, f.heads, f.vocab};
  if (anyShape && f.hidden % f.heads != 0)
    ZRT_THROW(InvalidArgument, "--hidden ", f.hidden, " is not a multiple of --heads ", f.heads);
  if (g.params->count()) {
    in.model = fromParamCount(parseParamCount(f.params, "--params"), "--params " + f.params);
  } else if (g.manifest->count()) {
    in.model = readManifest(f.manifest);
    if (anyShape) in.model.shape = shape;
  } else if (anyShape) {
    in.model = fromTransformerShape(shape);
  } else {
    ZRT_THROW(InvalidArgument, "no model given: pass --params (e.g. 7B), a transformer shape "
                               "(--layers --hidden --heads --vocab) or --manifest FILE");
  }
  if (g.loraRank->count()) {
    if (g.params->count())
      ZRT_THROW(InvalidArgument, "--lora-rank needs the model's tensor shapes: give a transformer "
                                 "shape (--layers --hidden --heads --vocab) or --manifest, not --params");
    in.loraModel = addLora(in.model, f.loraRank, f.loraTargets);
  }
}

Training trainingFrom(const Flags& f, const FlagHandles& g) {
  Training tr;
  tr.precision = parseDType(f.precision);
  tr.optimizer = f.optimizer == "sgd" ? OptimizerType::SGD
                 : f.optimizer == "adamw" ? OptimizerType::AdamW
                                          : OptimizerType::Adam;
  tr.sgdMomentum = f.momentum != 0.0;
  if (g.momentum->count() && tr.optimizer != OptimizerType::SGD)
    ZRT_THROW(InvalidArgument, "--momentum applies to --optimizer sgd only");
  tr.seqLen = f.seqLen;
  tr.flashAttention = f.flashAttention;
  tr.zero.offload_optimizer.pin_memory = f.pinMemory;
  tr.zero.offload_param.pin_memory = f.pinMemory;
  return tr;
}

// The strategy run now ("no change").
Strategy baselineFrom(const Flags& f) {
  Strategy base;
  base.stage = f.stage;
  base.offloadOptimizer = parseOffload(f.offload);
  base.offloadParam = parseOffload(f.offloadParam);
  base.checkpointing = f.checkpointing;
  base.microBatch = f.microBatch;
  base.gradAccum = f.gradAccum;
  return base;
}

// --config: the file's settings where no flag gave them; returns the file's JSON.
nlohmann::json applyConfig(const Flags& f, const FlagHandles& g, PlanInputs& in, double& momentum) {
  GivenFlags given;
  given.precision = g.precision->count() > 0;
  given.optimizer = g.optimizer->count() > 0;
  given.momentum = g.momentum->count() > 0;
  given.microBatch = g.micro->count() > 0;
  given.gradAccum = g.accum->count() > 0;
  given.stage = g.stage->count() > 0;
  given.offloadOptimizer = g.offload->count() > 0;
  given.offloadParam = g.offloadParam->count() > 0;
  given.pinMemory = g.pin->count() > 0;
  return applyConfigFile(f.config, given, in, momentum);
}

// The table or JSON, with --explain's formulas for the baseline and the recommendation (or every
// strategy).
void printPlan(std::ostream& out, const Plan& plan, const Flags& f) {
  const Evaluation* recommended =
      plan.recommended ? &*plan.candidates[*plan.recommended].fitting : nullptr;
  if (f.json) {
    nlohmann::json j = planToJson(plan);
    if (f.explainFlag || f.explainAll) {
      j["explain"] = nlohmann::json::object();
      j["explain"]["baseline"] = explain(plan, plan.baseline);
      if (recommended) j["explain"]["recommended"] = explain(plan, *recommended);
      if (f.explainAll) {
        for (const auto& c : plan.candidates) j["explain"][c.given.strategy.id()] = explain(plan, c.given);
      }
    }
    out << j.dump(2) << "\n";
  } else {
    out << formatTable(plan, f.detail);
    if (f.explainFlag || f.explainAll) {
      out << "\nFormulas (docs/plan.md):\n" << explain(plan, plan.baseline);
      if (recommended && recommended->strategy.id() != plan.baseline.strategy.id())
        out << "\n" << explain(plan, *recommended);
      else if (recommended && recommended->strategy.microBatch != plan.baseline.strategy.microBatch)
        out << "\n" << explain(plan, *recommended);
    }
    if (f.explainAll) {
      for (const auto& c : plan.candidates) out << "\n" << explain(plan, c.given);
    }
  }
}

// --write-config: the recommendation as a DeepSpeed config, loaded as the Engine would load it
// before it is written. Returns the exit code.
int writeRecommendedConfig(const Plan& plan, const Flags& f, const nlohmann::json* rawConfig,
                           double momentum, std::ostream& err) {
  if (!plan.recommended) {
    err << "zrt-plan: --write-config " << f.writeConfig << ": no strategy fits, nothing written\n";
    return 1;
  }
  const Evaluation& recommended = *plan.candidates[*plan.recommended].fitting;
  WriteConfigOptions wo;
  wo.base = rawConfig ? &*rawConfig : nullptr;
  wo.nvmePath = f.nvmePath;
  wo.momentum = momentum;
  const nlohmann::json cfg = strategyConfig(plan, recommended, wo);
  // Never write a config the Engine would refuse: load it first, as the Engine will.
  try {
    parseConfig(cfg.dump(), f.writeConfig, plan.inputs.hardware.worldSize);
  } catch (const ConfigError& e) {
    err << "zrt-plan: --write-config " << f.writeConfig
        << ": the config for the recommendation would not load, nothing written: " << e.what()
        << "\n";
    return 1;
  }
  std::ofstream file(f.writeConfig);
  file << cfg.dump(2) << "\n";
  file.close();
  if (!file) {
    err << "zrt-plan: --write-config: could not write '" << f.writeConfig << "'\n";
    return 1;
  }
  const Strategy& s = recommended.strategy;
  err << "zrt-plan: wrote " << f.writeConfig << " (" << s.id() << ")";
  if (s.checkpointing || s.lora)
    err << "; activation checkpointing and LoRA adapters are set up in the model code, not the config";
  err << "\n";
  return 0;
}

}  // namespace

int runPlan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Flags f;
  CLI::App app{"zrt-plan: the memory bill of a training run before it starts, per strategy, and "
               "which strategy to use. Sizes take K/M/G/T (binary); GB in the output is 1e9 bytes.",
               "zrt-plan"};
  const FlagHandles g = addFlags(app, f);

  std::vector<const char*> argv{"zrt-plan"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "zrt-plan: " << e.what() << "\n(run zrt-plan --help for the flags)\n";
    return 2;
  }

  try {
    PlanInputs in;
    in.hardware = hardwareFrom(f, g);
    modelFrom(f, g, in);
    in.training = trainingFrom(f, g);
    in.baseline = baselineFrom(f);
    double momentum = f.momentum;
    std::optional<nlohmann::json> rawConfig;
    if (!f.config.empty()) rawConfig = applyConfig(f, g, in, momentum);
    try {
      validateOffload(in.baseline.stage, in.baseline.offloadOptimizer, in.baseline.offloadParam);
    } catch (const InvalidArgument& e) {
      ZRT_THROW(InvalidArgument, "--stage/--offload/--offload-param (the current strategy): ", e.what());
    }

    const Plan plan = makePlan(in);
    printPlan(out, plan, f);
    if (!f.writeConfig.empty())
      return writeRecommendedConfig(plan, f, rawConfig ? &*rawConfig : nullptr, momentum, err);
    return 0;
  } catch (const InvalidArgument& e) {
    err << "zrt-plan: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace zrt::plan

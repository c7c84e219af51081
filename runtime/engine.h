// The Engine: what a training program embeds, as DeepSpeed's engine. Built from a DeepSpeed
// config, a Device and a Communicator (every rank of it one data-parallel rank), it owns the
// model states the ZeRO stage assigns to this rank (partition/model_states.h), reduces gradients
// in buckets while backward runs (comm/gradient_bucketer.h), steps the optimizer on this rank's
// shard and gathers the updated parameters back (comm/allgather_bucketer.h).
//
// One training step in the caller's code:
//   for each of engine.accumulationSteps() micro-batches:
//     engine.beginMicroStep();
//     forward, module by module, reading module m's parameters for as long as a
//       GatheredParameters(engine, m) lives (runtime/gathered_parameters.h; or
//       engine.parameters(m) ... engine.release(m));
//     backward in reverse: gather module m again, write its gradients (seeded with
//       engine.gradientSeed(), the loss scale over the accumulation steps) into
//       engine.gradients(m), then engine.backwardDone(m), which hands them to the buckets;
//     engine.endMicroStep();
//   StepReport r = engine.step();
// Collective calls (every rank makes them, in the same order): construction, beginMicroStep,
// parameters/release at stage 3 (and GatheredParameters), backwardDone, endMicroStep, step,
// parameterValues and stateDict (runtime/state_dict.h), save, load, loadWeights. Reading
// parameters outside a micro-step (a forward-only evaluation between steps) is fine, at every
// stage; gradients() is only for a micro-step.
//
// Stages 0 (data parallel), 1 (optimizer state sharded), 2 (gradients sharded too) and 3
// (parameters sharded too: parameters(m) gathers module m, release(m) frees it, and the
// gathers of the coming modules are posted ahead by the recorded trace,
// partition/param_coordinator.h); fp32,
// fp16 with dynamic loss scaling and bf16; Adam, AdamW and SGD; clipping by the global norm;
// the config's LR schedule; parameter groups. Every rank ends a step with the same parameters,
// equal to one rank training on the whole batch (tests/runtime/engine_equivalence_test.cpp).
// Misuse (a module reported twice or never) is found on the rank at fault and reported on every
// rank at endMicroStep, after the collectives that were due, so no rank waits for a peer that
// gave up.
// The config's zrt.comm_timeout_s becomes the timeout of the communicators the Engine is given
// (Communicator::useConfigTimeout: ZRT_COMM_TIMEOUT_S, when set, still wins), for as long as the
// communicator lives.
// Construction is collective. Thread-safety: one thread (the training loop) drives an Engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/config/config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "offload/offload_engine.h"
#include "runtime/model_spec.h"
#include "runtime/tensor_ref.h"

namespace zrt {

struct StepReport {
  std::int64_t step = 0;        // optimizer steps attempted so far, this one included
  bool taken = true;            // false: skipped (gradients overflowed on some rank)
  double gradNorm = 0;          // global L2 norm of the unscaled gradients, before clipping
  double lossScale = 1;         // the scale this step's gradients carried
  double lr = 0;                // group 0's learning rate for this step
  double computeSeconds = 0;    // the caller's forward and backward
  double commSeconds = 0;       // communication the caller waited for (not hidden)
  double optimizerSeconds = 0;  // the optimizer and the parameter gather
  double ioSeconds = 0;         // of the optimizer's time: waiting on NVMe (offload_optimizer nvme,
                                // and writing the updated shard with offload_param nvme)
  // Stage 3: module fetches that waited for a gather posted only then (on demand), that found
  // their gather posted ahead by the trace (prefetched), and that found a kept copy (reused).
  std::int64_t gathersOnDemand = 0;
  std::int64_t gathersPrefetched = 0;
  std::int64_t gathersReused = 0;
  // offload_param nvme: modules whose NVMe reads started before their gather was due, and the
  // time fetches waited for reads (part of commSeconds' waits in forward and backward).
  std::int64_t paramReadsAhead = 0;
  double paramReadWaitSeconds = 0;
};

class Engine {
 public:
  Engine(const Config& config, Device& device, comm::Communicator& comm, EngineModel model);
  // With a second communicator over the same ranks for the model's data: the gradient buckets,
  // the parameter gathers and the stage-3 reads, as a GPU job hands NCCL its device buffers
  // while the Engine's agreements (set-up, overflow, misuse, step reports, checkpoints) stay on
  // `comm`, a host backend. A `data` backend that takes device memory only is handed device
  // memory only: what lives in host memory (an offloaded shard, an NVMe read) is staged through
  // device memory (comm/staged_communicator.h). Both must outlive the Engine.
  Engine(const Config& config, Device& device, comm::Communicator& comm, comm::Communicator& data,
         EngineModel model);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int stage() const;
  DType precision() const;
  int accumulationSteps() const;
  std::size_t numModules() const;
  int moduleIndex(const std::string& name) const;  // -1 when there is none
  const std::string& moduleName(std::size_t module) const;

  // The factor the caller seeds backward with: loss scale / gradient_accumulation_steps. With
  // it, the engine's average over ranks gives the mean gradient of the global batch.
  double gradientSeed() const;
  double lossScale() const;
  // Learning rates set from outside, one per parameter group, for the optimizer steps from now
  // on instead of the config's schedule (a training script's own LR scheduler, as DeepSpeed
  // takes a client lr_scheduler). Every rank passes the same values. Throws InvalidArgument for
  // a count other than the groups' or a value that is negative or not finite.
  void setLearningRates(const std::vector<double>& perGroup);
  // Each parameter group's learning rate for the next optimizer step (the schedule's, or the
  // ones set above).
  std::vector<double> learningRates() const;

  void beginMicroStep();
  // Module m's parameters, whole, in the training dtype, in registration order. At stage 3 this
  // is a fetch: it returns once the module's parameters are gathered; each call is paired with
  // release(m) when the caller is done reading them for now (forward, or backward after
  // backwardDone). At stages 0-2 the parameters are always whole and release() does nothing.
  std::vector<TensorRef> parameters(std::size_t module);
  void release(std::size_t module);
  // Where module m's gradients go (training dtype, overwritten each micro-step; the engine
  // accumulates). Valid until backwardDone(m).
  std::vector<TensorRef> gradients(std::size_t module);
  void backwardDone(std::size_t module);
  // backwardDone(m) with gradient k of gradients(m) read from from[k] where it is not null (the
  // caller's own buffer, same dtype and length, read before this returns), not from the
  // engine's buffer: a caller whose gradients are already in memory of its own (PyTorch's) need
  // not copy them into gradients(m) first. gradients(m) is still asked for first.
  void backwardDone(std::size_t module, const std::vector<const void*>& from);
  // The stream on which backwardDone reads the caller's gradients and the gradients(m) it
  // wrote, where the host cannot read device memory; nullptr on a host device. A caller whose own
  // stream (torch's) is still writing them makes this one wait for that work through an event
  // (Stream::waitEvent), not a device-wide synchronisation. The Engine's calls return with their
  // device work on the caller's memory finished (they wait for it themselves).
  Stream* gradientStream() const;
  // Finishes the micro-step's reductions; throws on every rank when any rank misused the API.
  void endMicroStep();
  // At the accumulation boundary: clip, step the optimizer (or skip on overflow), gather.
  StepReport step();

  // The ledger by tag and place, as torch.cuda.memory_summary.
  std::string memorySummary() const;

  // For live metrics (runtime/metrics): the NVMe engine's figures (shared by the optimizer
  // swapper and the parameter store), nullopt when nothing goes to NVMe; and the engine's own
  // communication lane (parameter gathers on a duplicate of the communicator, where the backend
  // has one; its collectives are counted there, not in the communicator's stats), or nullptr.
  std::optional<offload::EngineStats> ioStats() const;
  const comm::Communicator* gatherLane() const;

  // Every parameter's current value in fp32, by module and registration order; for tests and
  // checkpoints. Collective at stage 3 (it gathers the parameter from every rank's shard).
  std::vector<float> parameterValues(std::size_t module, std::size_t param) const;

 private:
  struct Impl;
  Engine(const Config& config, Device& device, comm::Communicator& comm, comm::Communicator* data,
         EngineModel model);
  std::unique_ptr<Impl> impl_;

  // ---- Checkpoints (runtime/checkpoint/checkpoint.h, docs/checkpoint.md) ----
 public:
  // Writes the whole training state to <dir>/<tag> atomically and points <dir>/latest at it.
  // Collective; only at an accumulation boundary (before beginMicroStep or after step()).
  void save(const std::string& dir, const std::string& tag);
  // The same, with the training program's own `metadata` (a JSON object: what it needs to read
  // the model back, such as LoRA settings) stored verbatim in the manifest (docs/checkpoint.md,
  // "metadata"). Every rank passes it; rank 0's is written.
  void save(const std::string& dir, const std::string& tag, const nlohmann::json& metadata);
  // Resumes from <dir>/<tag> ("" or "latest": the tag <dir>/latest names), saved with any world
  // size and stage; the model, dtype and optimizer must match. Collective.
  void load(const std::string& dir, const std::string& tag);
  // Parameters (and master weights) only, by name, from a checkpoint directory (<dir>/<tag>, or
  // <dir> with a latest pointer) or a safetensors file. Collective.
  void loadWeights(const std::string& path);
  // The same, except that the parameters named in `mayBeMissing` ("<module>/<param>") may be
  // absent from the source: those keep their current values (a LoRA adapter's initialisation
  // over a base model's weights). Present, they are loaded like the rest.
  void loadWeights(const std::string& path, const std::vector<std::string>& mayBeMissing);
  // The same from a safetensors file whose tensors carry other names (Hugging Face's, say):
  // `rename` gives the engine's "<module>.<param>" for a tensor's name in the file, and the file
  // is read where it is. A name it leaves unmatched is reported as one the model lacks; two
  // tensors renamed to one parameter are refused, naming both. A checkpoint directory's names are
  // the engine's own, so `rename` does not apply to one.
  void loadWeights(const std::string& path, const std::vector<std::string>& mayBeMissing,
                   const std::function<std::string(const std::string&)>& rename);

 private:
  friend struct CheckpointAccess;
};

}  // namespace zrt

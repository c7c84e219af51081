#include "tools/plan/report.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace zrt::plan {

namespace {

std::string num(double v, const char* fmt = "%.2f") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string gbCell(std::uint64_t bytes) {
  return bytes == 0 ? "-" : num(static_cast<double>(bytes) / 1e9);
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", 100.0 * x);
  return buf;
}

std::string pad(std::string s, std::size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

std::uint64_t optimizerBytes(const PlanLedger& l, MemPlace place) {
  return l.get(Purpose::MasterWeights, place) + l.get(Purpose::OptimizerMoments, place);
}

std::uint64_t bufferBytesOn(const PlanLedger& l, MemPlace place) {
  return l.get(Purpose::CommBuckets, place) + l.get(Purpose::GatheredParams, place) +
         l.get(Purpose::SwapBuffers, place) + l.get(Purpose::GradientWorkspace, place) +
         l.get(Purpose::Reserve, place);
}

std::string fitsCell(const Candidate& c) {
  if (c.given.fits()) return "yes";
  if (c.fitting) return detail::cat("mb ", c.fitting->strategy.microBatch);
  return "no";
}

const ModelSpec& modelOf(const Plan& plan, const Strategy& s) {
  return s.lora ? *plan.inputs.loraModel : plan.inputs.model;
}

}  // namespace

std::string recommendationRule() {
  return "the first lever, in the order no change, smaller micro-batch with accumulation, "
         "activation checkpointing, ZeRO stage 1/2, stage 3, CPU offload, NVMe offload, LoRA "
         "adapters, with which some strategy fits (levers before it may be pulled too); among "
         "those, the smallest estimated slowdown, then the largest micro-batch, then the least "
         "device memory";
}

std::string formatTable(const Plan& plan, bool detail) {
  const PlanInputs& in = plan.inputs;
  const Hardware& hw = in.hardware;
  const Training& tr = in.training;
  std::ostringstream o;
  o << "zrt-plan: " << num(static_cast<double>(in.model.totalParams()) / 1e9, "%.3f")
    << " B parameters (" << in.model.source << "), " << nameOf(tr.precision) << ", "
    << nameOf(tr.optimizer)
    << (tr.optimizer == OptimizerType::SGD ? (tr.sgdMomentum ? " with momentum" : " without momentum") : "")
    << ", " << hw.worldSize << " rank(s), " << hw.ranksPerNode << " per node\n";
  o << "  device " << gigabytes(hw.deviceBytes) << " per rank; host " << gigabytes(hw.hostBytes)
    << " and NVMe " << gigabytes(hw.nvmeBytes) << " per node; micro-batch " << in.baseline.microBatch
    << " x " << in.baseline.gradAccum << " accumulation steps; sequence " << tr.seqLen << "\n";
  if (in.loraModel) {
    o << "  LoRA: rank " << in.loraModel->loraRank << " on " << in.loraModel->loraAdaptedTensors
      << " projections: " << in.loraModel->trainableParams() << " adapter parameters\n";
  }
  if (in.activationModel)
    o << "  activations: " << in.activationModel->name << "\n";
  else if (!in.model.shape)
    o << "  activations not estimated: give --layers, --hidden, --heads, --vocab (or a manifest "
         "with \"model\") to include them\n";
  o << "  baseline (no change): " << in.baseline.id()
    << (plan.baseline.fits() ? " fits" : " does not fit") << "\n\n";

  o << "Bytes per rank in GB (1e9). Device columns by purpose; optim = fp32 master + moments; "
       "bufs = comm buckets, gathered params, gradient workspace, reserve.\n";
  o << pad("strategy", 20, true) << pad("params", 8) << pad("grads", 8) << pad("optim", 8)
    << pad("acts", 8) << pad("bufs", 8) << pad("device", 9) << pad("host", 9) << pad("nvme", 9)
    << pad("fits", 7) << pad("slowdown", 10) << "  lever\n";
  for (std::size_t i = 0; i < plan.candidates.size(); ++i) {
    const Candidate& c = plan.candidates[i];
    const PlanLedger& l = c.given.ledger;
    const MemPlace d = MemPlace::Device;
    std::string id = c.given.strategy.id();
    if (plan.recommended && *plan.recommended == i) id = "* " + id;
    if (c.given.strategy.id() == in.baseline.id()) id += " (now)";
    o << pad(id, 20, true) << pad(gbCell(l.get(Purpose::Parameters, d)), 8)
      << pad(gbCell(l.get(Purpose::Gradients, d)), 8) << pad(gbCell(optimizerBytes(l, d)), 8)
      << pad(gbCell(l.get(Purpose::Activations, d)), 8) << pad(gbCell(bufferBytesOn(l, d)), 8)
      << pad(gbCell(l.total(d)), 9) << pad(gbCell(l.hostTotal()), 9)
      << pad(gbCell(l.total(MemPlace::Nvme)), 9) << pad(fitsCell(c), 7)
      << pad(c.fitting ? percent(c.slowdown) : "-", 10) << "  "
      << (c.fitting ? leverName(c.level) : "") << "\n";
    if (detail) {
      for (int p = 0; p < kNumPurposes; ++p)
        for (int pl = 0; pl < kNumMemPlaces; ++pl)
          if (l.cells[p][pl] != 0)
            o << "      " << pad(std::string(purposeName(static_cast<Purpose>(p))), 18, true)
              << pad(std::string(nameOf(static_cast<MemPlace>(pl))), 12, true) << " "
              << l.cells[p][pl] << " B\n";
      for (const auto& why : c.given.problems) o << "      does not fit: " << why << "\n";
    }
  }
  o << "\n";
  if (!plan.recommended) {
    o << "No strategy fits. Closest: the table's smallest device column; add ranks, device or "
         "host memory, NVMe space (--nvme), or consider LoRA (--lora-rank).\n";
    return o.str();
  }
  const Candidate& r = plan.candidates[*plan.recommended];
  const Evaluation& e = *r.fitting;
  o << "Recommended: " << e.strategy.id() << " (" << e.strategy.describe() << ")\n";
  o << "  lever: " << leverName(r.level) << "\n";
  o << "  estimated slowdown: " << percent(r.slowdown) << " per step vs. the baseline ("
    << num(e.time.total(), "%.3g") << " s vs " << num(plan.baseline.time.total(), "%.3g")
    << " s; recompute " << num(e.time.recompute, "%.3g") << " s, comm " << num(e.time.comm, "%.3g")
    << " s, PCIe " << num(e.time.pcie, "%.3g") << " s, CPU optimizer "
    << num(e.time.cpuOptimizer, "%.3g") << " s, NVMe " << num(e.time.nvme, "%.3g")
    << " s; no overlap assumed)\n";
  o << "  uses " << gigabytes(e.ledger.total(MemPlace::Device)) << " of "
    << gigabytes(hw.deviceBytes) << " device memory per rank";
  if (e.ledger.hostTotal()) o << ", " << gigabytes(e.ledger.hostTotal()) << " host per rank";
  if (e.ledger.total(MemPlace::Nvme)) o << ", " << gigabytes(e.ledger.total(MemPlace::Nvme)) << " NVMe per rank";
  o << "\n  rule: " << recommendationRule() << ".\n";
  return o.str();
}

namespace {

nlohmann::json ledgerJson(const PlanLedger& l) {
  nlohmann::json j = nlohmann::json::object();
  const std::pair<MemPlace, const char*> places[] = {{MemPlace::Device, "device"},
                                                     {MemPlace::PinnedHost, "pinned_host"},
                                                     {MemPlace::Host, "host"},
                                                     {MemPlace::Nvme, "nvme"}};
  for (auto [place, name] : places) {
    nlohmann::json cell = nlohmann::json::object();
    for (int p = 0; p < kNumPurposes; ++p) {
      std::string key(purposeName(static_cast<Purpose>(p)));
      for (auto& ch : key)
        if (ch == ' ') ch = '_';
      cell[key] = l.cells[p][static_cast<int>(place)];
    }
    j[name] = cell;
  }
  return j;
}

nlohmann::json evaluationJson(const Evaluation& e) {
  const Strategy& s = e.strategy;
  const PlanLedger& l = e.ledger;
  nlohmann::json j;
  j["id"] = s.id();
  j["stage"] = s.stage;
  j["offload_optimizer"] = std::string(nameOf(s.offloadOptimizer));
  j["offload_param"] = std::string(nameOf(s.offloadParam));
  j["activation_checkpointing"] = s.checkpointing;
  j["lora"] = s.lora;
  j["micro_batch"] = s.microBatch;
  j["gradient_accumulation_steps"] = s.gradAccum;
  j["device_bytes"] = l.total(MemPlace::Device);
  j["host_bytes"] = l.hostTotal();
  j["host_pinned_bytes"] = l.total(MemPlace::PinnedHost);
  j["nvme_bytes"] = l.total(MemPlace::Nvme);
  j["model_state_device_bytes"] = l.modelStates(MemPlace::Device);
  j["model_state_host_bytes"] = l.modelStates(MemPlace::PinnedHost) + l.modelStates(MemPlace::Host);
  j["model_state_nvme_bytes"] = l.modelStates(MemPlace::Nvme);
  j["breakdown"] = ledgerJson(l);
  j["optimizer_bytes_per_param"] = e.k();
  j["fits"] = e.fits();
  j["fit_problems"] = e.problems;
  j["step_seconds"] = {{"compute", e.time.compute},  {"recompute", e.time.recompute},
                       {"comm", e.time.comm},        {"pcie", e.time.pcie},
                       {"cpu_optimizer", e.time.cpuOptimizer}, {"nvme", e.time.nvme},
                       {"total", e.time.total()}};
  return j;
}

}  // namespace

nlohmann::json planToJson(const Plan& plan) {
  const PlanInputs& in = plan.inputs;
  nlohmann::json j;
  j["model"] = {{"source", in.model.source},
                {"params", in.model.totalParams()},
                {"trainable_params", in.model.trainableParams()},
                {"tensors", in.model.tensors.size()}};
  if (in.model.shape) {
    j["model"]["layers"] = in.model.shape->layers;
    j["model"]["hidden"] = in.model.shape->hidden;
    j["model"]["heads"] = in.model.shape->heads;
    j["model"]["vocab"] = in.model.shape->vocab;
  }
  if (in.loraModel) {
    j["lora"] = {{"rank", in.loraModel->loraRank},
                 {"targets", in.loraModel->loraTargets},
                 {"adapted_tensors", in.loraModel->loraAdaptedTensors},
                 {"adapter_params", in.loraModel->trainableParams()},
                 {"frozen_params", in.loraModel->frozenParams()}};
  }
  const Hardware& hw = in.hardware;
  j["hardware"] = {{"world_size", hw.worldSize},       {"ranks_per_node", hw.ranksPerNode},
                   {"device_bytes", hw.deviceBytes},    {"host_bytes_per_node", hw.hostBytes},
                   {"nvme_bytes_per_node", hw.nvmeBytes}, {"reserve_bytes", hw.reserveBytes},
                   {"pcie_bytes_per_s", hw.pcieBps},    {"host_mem_bytes_per_s", hw.hostMemBps},
                   {"nvme_read_bytes_per_s", hw.nvmeReadBps},
                   {"nvme_write_bytes_per_s", hw.nvmeWriteBps},
                   {"nvme_bandwidth_source", hw.nvmeBandwidthSource},
                   {"net_bytes_per_s", hw.netBps},      {"flops", hw.flops}};
  const Training& tr = in.training;
  j["training"] = {{"precision", std::string(nameOf(tr.precision))},
                   {"optimizer", std::string(nameOf(tr.optimizer))},
                   {"sgd_momentum", tr.sgdMomentum},
                   {"seq_len", tr.seqLen},
                   {"reduce_bucket_size", tr.zero.reduce_bucket_size},
                   {"allgather_bucket_size", tr.zero.allgather_bucket_size},
                   {"overlap_comm", tr.overlapComm ? nlohmann::json(*tr.overlapComm)
                                                   : nlohmann::json("default: on at stage 3 only")},
                   {"flash_attention", tr.flashAttention},
                   {"pin_memory", tr.zero.offload_optimizer.pin_memory},
                   {"stage3_prefetch_bucket_size", tr.zero.stage3_prefetch_bucket_size},
                   {"stage3_max_live_parameters", tr.zero.stage3_max_live_parameters}};
  j["baseline"] = in.baseline.id();
  j["rule"] = recommendationRule();
  nlohmann::json rows = nlohmann::json::array();
  for (const Candidate& c : plan.candidates) {
    nlohmann::json row = evaluationJson(c.given);
    row["lever"] = c.fitting ? nlohmann::json(std::string(leverName(c.level))) : nlohmann::json();
    row["lever_level"] = c.fitting ? nlohmann::json(c.level) : nlohmann::json();
    row["fits_with_micro_batch"] =
        c.fitting ? nlohmann::json(c.fitting->strategy.microBatch) : nlohmann::json();
    row["slowdown"] = c.fitting ? nlohmann::json(c.slowdown) : nlohmann::json();
    rows.push_back(std::move(row));
  }
  j["strategies"] = std::move(rows);
  if (plan.recommended) {
    const Candidate& r = plan.candidates[*plan.recommended];
    j["recommended"] = r.given.strategy.id();
    nlohmann::json rec = evaluationJson(*r.fitting);
    rec["lever"] = std::string(leverName(r.level));
    rec["slowdown"] = r.slowdown;
    j["recommendation"] = std::move(rec);
  } else {
    j["recommended"] = nullptr;
    j["recommendation"] = nullptr;
  }
  return j;
}

// ---- explain --------------------------------------------------------------------------------

namespace {

std::string placeOf(const PlanLedger& l, Purpose p) {
  std::string out;
  for (int pl = 0; pl < kNumMemPlaces; ++pl) {
    if (l.cells[static_cast<int>(p)][pl] == 0) continue;
    out += (out.empty() ? "" : " + ") + std::string(nameOf(static_cast<MemPlace>(pl)));
  }
  return out.empty() ? "-" : out;
}

std::uint64_t allPlaces(const PlanLedger& l, Purpose p) {
  std::uint64_t v = 0;
  for (int pl = 0; pl < kNumMemPlaces; ++pl) v += l.get(p, static_cast<MemPlace>(pl));
  return v;
}

std::string line(std::string label, std::string formula, std::uint64_t value, std::string where = "") {
  std::string s = "  " + pad(std::move(label), 20, true) + formula + " = " + std::to_string(value) +
                  " B (" + gigabytes(value) + ")";
  if (!where.empty()) s += "  -> " + where;
  return s + "\n";
}

// "Ψ'/N'" for a shard, "Ψ'" for a whole buffer.
const char* symbolOf(const StatePlacement& s) { return s.sharded ? "Ψ'/N'" : "Ψ'"; }

// Parameter counts, K, the ZeRO paper's figure and the padding: what the model-state lines use.
void explainSizes(std::ostream& o, const Plan& plan, const Evaluation& e) {
  const Strategy& s = e.strategy;
  const Training& tr = plan.inputs.training;
  const ModelSpec& model = modelOf(plan, s);
  const OptimizerStateSpec& spec = e.placement.optimizer;
  const std::uint64_t p = dtypeSize(tr.precision);
  const Padded& pd = e.padded();
  const int N = plan.inputs.hardware.worldSize;
  o << "Parameters: trainable Ψ = " << e.trainable;
  if (e.frozen) o << ", frozen Φ = " << e.frozen;
  o << "\n";
  if (model.shape && model.source.starts_with("transformer")) {
    const auto& sh = *model.shape;
    o << "  12·L·h² + V·h = 12·" << sh.layers << "·" << sh.hidden << "² + " << sh.vocab << "·"
      << sh.hidden << " = " << transformerParamCount(sh) << "\n";
  }
  if (s.lora) {
    o << "  LoRA r = " << model.loraRank << " on " << model.loraAdaptedTensors
      << " projections [d_out, d_in]: Ψ = Σ r·(d_in + d_out) = " << e.trainable
      << "; the base is frozen (parameters only)\n";
  }
  o << "Optimizer " << nameOf(tr.optimizer) << " in " << nameOf(tr.precision)
    << (s.offloadOptimizer != OffloadDevice::None ? ", offloaded" : "") << ": master weights "
    << (spec.masterWeights ? 1 : 0) << ", moments " << spec.moments << ", K = 4·("
    << (spec.masterWeights ? 1 : 0) << " + " << spec.moments << ") = " << e.k()
    << " bytes per parameter; p = " << p << " bytes per parameter and gradient\n";
  const char* paper[] = {"(p + p + K)·Ψ", "p·Ψ + p·Ψ + K·Ψ/N", "p·Ψ + (p + K)·Ψ/N", "(p + p + K)·Ψ/N"};
  const double paperBytes = zeroPaperBytes(e.trainable, s.stage, N, p, e.k());
  o << "ZeRO paper, stage " << s.stage << ": " << paper[s.stage] << " with N = " << N << " -> "
    << num(paperBytes, "%.0f") << " B (" << gigabytes(static_cast<std::uint64_t>(paperBytes))
    << "), before padding and placement" << (e.frozen ? "; the frozen Φ adds p·Φ (p·Φ/N at stage 3)" : "")
    << "\n";
  o << "Padding (core/shard.h): N' = " << pd.parts << " (1 at stage 0), Ψ' = ceil(Ψ / (N'·"
    << kShardAlignElements << "))·N'·" << kShardAlignElements << " = " << pd.trainable
    << ", shard Ψ'/N' = " << pd.trainableShard;
  if (e.frozen) o << "; Φ' = " << pd.frozen << ", Φ'/N' = " << pd.frozenShard;
  o << "\n";
}

// One line per model state, its formula from the placement rule (partition/placement.h).
void explainModelStates(std::ostream& o, const Plan& plan, const Evaluation& e) {
  const ModelStatePlacement& m = e.placement;
  const PlanLedger& l = e.ledger;
  const std::uint64_t p = dtypeSize(plan.inputs.training.precision);
  o << "Model states per rank:\n";
  {
    const StatePlacement& t = m.parameters;
    std::string f = detail::cat("p·", symbolOf(t), e.frozen ? detail::cat(" + p·", t.sharded ? "Φ'/N'" : "Φ'") : "",
                                " = ", p, "·", t.elements);
    if (e.frozen) f += detail::cat(" + ", p, "·", m.frozenParameters.elements);
    o << line("parameters", f, allPlaces(l, Purpose::Parameters),
              placeOf(l, Purpose::Parameters) +
                  (e.strategy.offloadParam != OffloadDevice::None ? " (offload_param)" : ""));
  }
  {
    // Gradients on the device, in pinned host memory beside an offloaded optimizer, or both.
    const StatePlacement& dev = m.gradients;
    const StatePlacement& host = m.gradientHostShard;
    const StatePlacement& first = dev.elements == 0 && host.elements != 0 ? host : dev;
    std::string f = detail::cat("p·", symbolOf(first), " = ", p, "·", first.elements);
    if (&first == &dev && host.elements != 0)
      f += detail::cat(" on the device + p·", symbolOf(host), " = ", p, "·", host.elements, " pinned on the host");
    // 16-bit training with accumulation: the micro-steps add up in fp32.
    if (const StatePlacement& acc = m.gradientAccumulator; acc.elements != 0)
      f += detail::cat(" + fp32 accumulator 4·", symbolOf(acc), " = 4·", acc.elements, " (", e.strategy.gradAccum,
                       " micro-steps)");
    o << line("gradients", f, allPlaces(l, Purpose::Gradients), placeOf(l, Purpose::Gradients));
  }
  if (m.optimizer.masterWeights) {
    o << line("master weights", detail::cat("4·", symbolOf(m.masterWeights), " = 4·", m.masterWeights.elements),
              allPlaces(l, Purpose::MasterWeights), placeOf(l, Purpose::MasterWeights));
  }
  if (m.optimizer.moments) {
    const int k = 4 * m.optimizer.moments;
    o << line("moments", detail::cat(k, "·", symbolOf(m.moment), " = ", k, "·", m.moment.elements),
              allPlaces(l, Purpose::OptimizerMoments), placeOf(l, Purpose::OptimizerMoments));
  }
}

// Korthikanti et al.'s activation terms with the numbers substituted.
void explainActivations(std::ostream& o, const Plan& plan, const Evaluation& e) {
  const Strategy& s = e.strategy;
  const Training& tr = plan.inputs.training;
  const ModelSpec& model = modelOf(plan, s);
  const PlanLedger& l = e.ledger;
  o << "Activations";
  if (plan.inputs.activationModel) {
    o << " (" << plan.inputs.activationModel->name << "):\n";
    for (int pl = 0; pl < kNumMemPlaces; ++pl) {
      const auto place = static_cast<MemPlace>(pl);
      if (l.get(Purpose::Activations, place))
        o << line("activations", "as allocated", l.get(Purpose::Activations, place), std::string(nameOf(place)));
    }
  } else if (!e.activationsKnown) {
    o << ": not estimated (no transformer shape)\n";
  } else {
    const auto& sh = *model.shape;
    const std::uint64_t sl = tr.seqLen, b = s.microBatch;
    const std::uint64_t scale = tr.precision == DType::F32 ? 2 : 1;
    o << " (Korthikanti et al. 2022, eq. 1; s = " << sl << ", b = " << b << ", h = " << sh.hidden
      << ", a = " << sh.heads << ", L = " << sh.layers << ", V = " << sh.vocab
      << (scale == 2 ? "; fp32 doubles the 16-bit terms" : "") << "):\n";
    ActivationInputs ai;
    ai.shape = sh;
    ai.seqLen = sl;
    ai.microBatch = b;
    ai.precision = tr.precision;
    const std::uint64_t layer = layerActivationBytes(ai);
    o << line("one layer", detail::cat(scale == 2 ? "2·" : "", "sbh(34 + 5as/h) = ", scale == 2 ? "2·(" : "",
                                       "34·", sl, "·", b, "·", sh.hidden, " + 5·", sh.heads, "·", sl,
                                       "²·", b, scale == 2 ? ")" : ""),
              layer);
    std::uint64_t lora = 0;
    if (model.loraRank && sh.layers) {
      const std::uint64_t per = model.loraAdaptedTensors / sh.layers;
      lora = scale * per * 2 * sl * b * model.loraRank;
      o << line("LoRA per layer", detail::cat(per, " adapters · 2·s·b·r = ", per, "·2·", sl, "·", b, "·", model.loraRank), lora);
    }
    if (s.checkpointing) {
      o << line("checkpointed", detail::cat("L·2sbh + one layer = ", sh.layers, "·", scale * 2, "·", sl, "·", b,
                                            "·", sh.hidden, " + ", layer + lora),
                sh.layers * scale * 2 * sl * b * sh.hidden + layer + lora);
    } else {
      o << line("all layers", detail::cat("L·one layer = ", sh.layers, "·", layer + lora),
                sh.layers * (layer + lora));
    }
    o << line("logits", detail::cat("4·s·b·V = 4·", sl, "·", b, "·", sh.vocab), 4 * sl * b * sh.vocab);
    o << line("activations", "sum", l.get(Purpose::Activations, MemPlace::Device), "device");
  }
}

// Communication, workspace, gathered and swap buffers, and the reserve (formulas.h, bufferBytes).
void explainBuffers(std::ostream& o, const Plan& plan, const Evaluation& e) {
  const Strategy& s = e.strategy;
  const Hardware& hw = plan.inputs.hardware;
  const Training& tr = plan.inputs.training;
  const ModelSpec& model = modelOf(plan, s);
  const PlanLedger& l = e.ledger;
  const Padded& pd = e.padded();
  const std::uint64_t p = dtypeSize(tr.precision);
  const ZeroConfig& z = tr.zero;
  const bool modules = model.modulesKnown;
  o << "Buffers:\n";
  if (s.stage <= 1) {
    o << "  reduce buckets      none: stages 0-1 all-reduce the gradient buffer in place\n";
  } else if (const std::uint64_t b = allPlaces(l, Purpose::CommBuckets)) {
    const bool overlap = tr.overlapComm.value_or(s.stage == 3);
    const std::uint64_t slots = overlap ? 2 : 1;
    const std::uint64_t staging = slots * e.largestReduceBucket * p;
    std::string f = detail::cat(slots, " (overlap_comm ", overlap ? "on" : "off", ")·largest bucket ",
                                e.largestReduceBucket, " (of reduce_bucket_size ", z.reduce_bucket_size, ")·", p);
    if (b > staging)
      f += detail::cat(" + ", b - staging, " B of receive buffers on the device (", s.gradAccum,
                       " micro-steps add up in the dtype)");
    o << line("reduce buckets", f, b, placeOf(l, Purpose::CommBuckets));
  }
  if (const std::uint64_t w = l.get(Purpose::GradientWorkspace, MemPlace::Device))
    o << line("gradient workspace", detail::cat("widest module's trainable elements ", w / p, "·", p), w, "device");
  else if (!modules)
    o << "  gradient workspace  not counted: the model's modules are not known (give a shape or a manifest)\n";
  if (s.stage == 3) {
    std::string f = modules ? detail::cat("(modules under persistence ", z.stage3_param_persistence_threshold,
                                          " + min(the others, max_live ", z.stage3_max_live_parameters, "))·", p)
                            : detail::cat("min(Ψ'+Φ' ", pd.trainable + pd.frozen, ", max(max_live ",
                                          z.stage3_max_live_parameters, ", largest tensor ", model.largestTensor(),
                                          "))·", p);
    o << line("gathered params", f, l.get(Purpose::GatheredParams, MemPlace::Device), "device");
  }
  if (s.offloadOptimizer == OffloadDevice::Nvme) {
    o << "  " << pad("optimizer swap", 20, true) << "pool of min(buffer_count " << z.offload_optimizer.buffer_count
      << ", sub-groups) · sub-group (min(sub_group_size " << z.sub_group_size << ", Ψ'/N' " << pd.trainableShard
      << ") to 1024)·4·" << (e.placement.optimizer.masterWeights ? 1 : 0) + e.placement.optimizer.moments
      << " states, 4K-rounded"
      << (hw.pinnedHugePageBytes ? detail::cat(", padded to ", hw.pinnedHugePageBytes, "-byte huge pages") : "")
      << "\n";
  }
  if (s.offloadParam == OffloadDevice::Nvme) {
    o << "  " << pad("parameter staging", 20, true) << "buffer_count " << z.offload_param.buffer_count
      << " · (align4K(largest piece of a module on NVMe·" << p << " + 2·" << hw.nvmeBlockBytes
      << ") + frozen piece)\n";
  }
  if (l.get(Purpose::SwapBuffers, MemPlace::PinnedHost))
    o << line("swap buffers", "sum", l.get(Purpose::SwapBuffers, MemPlace::PinnedHost), "pinned host");
  if (hw.reserveBytes) o << line("reserve", "--reserve", hw.reserveBytes, "device");
}

// Device per rank, host and NVMe per node, each against what the hardware has.
void explainTotals(std::ostream& o, const Plan& plan, const Evaluation& e) {
  const Hardware& hw = plan.inputs.hardware;
  const PlanLedger& l = e.ledger;
  o << "Totals per rank: device " << l.total(MemPlace::Device) << " B (" << gigabytes(l.total(MemPlace::Device))
    << ") vs " << hw.deviceBytes << " B: " << (e.fitsDevice ? "fits" : "does not fit") << "; host "
    << l.hostTotal() << " B x " << hw.ranksPerNode << " ranks per node = "
    << l.hostTotal() * static_cast<std::uint64_t>(hw.ranksPerNode) << " B vs " << hw.hostBytes << " B: "
    << (e.fitsHost ? "fits" : "does not fit") << "; NVMe " << l.total(MemPlace::Nvme) << " B x "
    << hw.ranksPerNode << " = " << l.total(MemPlace::Nvme) * static_cast<std::uint64_t>(hw.ranksPerNode)
    << " B vs " << hw.nvmeBytes << " B: " << (e.fitsNvme ? "fits" : "does not fit") << "\n";
}

// The step-time model's terms, and the slowdown against the baseline.
void explainStepTime(std::ostream& o, const Plan& plan, const Evaluation& e) {
  const Strategy& s = e.strategy;
  const Hardware& hw = plan.inputs.hardware;
  const Training& tr = plan.inputs.training;
  const StepTime& t = e.time;
  const std::uint64_t tokens = s.microBatch * s.gradAccum * tr.seqLen;
  const std::uint64_t all = e.trainable + e.frozen;
  o << "Step time per rank (tokens = b·accumulation·s = " << tokens << ", " << num(hw.flops, "%.3g")
    << " FLOP/s; nothing overlapped):\n";
  o << "  compute   (4·" << all << " + 2·" << e.trainable << ")·" << tokens << " / FLOP/s = "
    << num(t.compute, "%.4g") << " s\n";
  if (s.checkpointing)
    o << "  recompute 2·" << all << "·" << tokens << " / FLOP/s = " << num(t.recompute, "%.4g") << " s\n";
  o << "  comm      " << num(t.commBytes, "%.6g") << " B (stage " << s.stage
    << (s.stage <= 1 ? ": 2·Ψ'·p" : s.stage == 2 ? ": (accumulation + 1)·Ψ'·p" : ": accumulation·(gathers·(Ψ'+Φ') + Ψ')·p")
    << " · (N-1)/N) / " << num(hw.netBps, "%.3g") << " B/s = " << num(t.comm, "%.4g") << " s\n";
  if (t.pcieBytes)
    o << "  PCIe      " << num(t.pcieBytes, "%.6g") << " B / " << num(hw.pcieBps, "%.3g")
      << " B/s = " << num(t.pcie, "%.4g") << " s\n";
  if (t.cpuBytes)
    o << "  CPU optim " << hw.ranksPerNode << " ranks · Ψ'/N'·(2p + 2K) = " << num(t.cpuBytes, "%.6g")
      << " B / " << num(hw.hostMemBps, "%.3g") << " B/s = " << num(t.cpuOptimizer, "%.4g") << " s\n";
  if (t.nvmeReadBytes || t.nvmeWriteBytes)
    o << "  NVMe      " << num(t.nvmeReadBytes, "%.6g") << " B / " << num(hw.nvmeReadBps, "%.3g")
      << " B/s + " << num(t.nvmeWriteBytes, "%.6g") << " B / " << num(hw.nvmeWriteBps, "%.3g")
      << " B/s (" << hw.nvmeBandwidthSource << ") = " << num(t.nvme, "%.4g") << " s\n";
  const double base = plan.baseline.time.total();
  o << "  total " << num(t.total(), "%.4g") << " s; baseline " << num(base, "%.4g") << " s; slowdown "
    << percent(base > 0 ? t.total() / base - 1 : 0) << "\n";
}

}  // namespace

std::string explain(const Plan& plan, const Evaluation& e) {
  std::ostringstream o;
  o << "== " << e.strategy.id() << ": " << e.strategy.describe() << "\n";
  explainSizes(o, plan, e);
  explainModelStates(o, plan, e);
  explainActivations(o, plan, e);
  explainBuffers(o, plan, e);
  explainTotals(o, plan, e);
  explainStepTime(o, plan, e);
  return o.str();
}

}  // namespace zrt::plan

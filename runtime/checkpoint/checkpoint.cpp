#include "runtime/checkpoint/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <functional>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "comm/string_gather.h"
#include "core/error.h"
#include "core/log.h"
#include "core/shard.h"
#include "offload/aligned_buffer.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/fault_injection.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/json_integer.h"
#include "runtime/checkpoint/model_match.h"
#include "runtime/checkpoint/rank_agreement.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/staging.h"

namespace zrt::checkpoint {
namespace {

using nlohmann::json;

// One state as this rank holds it: element `holdBegin` of the flat buffer is data[0], and the
// rank holds `holdCount` real elements from there (the whole buffer at stages 0-2 for the
// parameters, the shard otherwise).
struct LocalState {
  std::string name;
  bool trainableBuffer = true;
  DType dtype = DType::F32;
  char* data = nullptr;
  const offload::SwapFile* swap = nullptr;  // instead of data: the state's swap file on NVMe
  std::uint64_t numel = 0;  // the buffer's unpadded length
  std::uint64_t holdBegin = 0;
  std::uint64_t holdCount = 0;
};

// Where the host reads and writes state buffer b: its memory, or its host copy where the host
// cannot touch device memory.
char* hostData(const EngineView& v, const StateBuffer& b) {
  const auto copy = v.hostCopies.find(b.data());
  return copy != v.hostCopies.end() ? copy->second : static_cast<char*>(b.data());
}

std::vector<LocalState> localStates(const EngineView& v) {
  const ModelStates& s = *v.states;
  const FlatLayout& t = s.trainableLayout();
  const FlatLayout& f = s.frozenLayout();
  std::vector<LocalState> out;
  auto params = [&](const char* name, bool trainable, const StateBuffer& b, const FlatLayout& l) {
    char* data = v.paramShards[trainable ? 0 : 1] ? v.paramShards[trainable ? 0 : 1] : hostData(v, b);
    LocalState x{name, trainable, v.dtype, data, nullptr, l.numel, 0, l.numel};
    if (v.stage >= 3) {
      x.holdBegin = l.shard.begin;
      x.holdCount = l.shard.valid;
    }
    out.push_back(x);
  };
  params("params", true, s.parameters(), t);
  params("frozen_params", false, s.frozenParameters(), f);
  // Master weights and moments are always the layout's shard (all of it at stage 0).
  auto shard = [&](const std::string& name, const StateBuffer& b) {
    out.push_back({name, true, DType::F32, hostData(v, b), b.swapFile(), t.numel, t.shard.begin,
                   t.shard.valid});
  };
  if (s.masterWeights()) shard("master", s.masterWeights());
  ZRT_ENFORCE_EQ(v.momentNames.size(), s.moments().size());
  for (std::size_t i = 0; i < s.moments().size(); ++i) shard(v.momentNames[i], s.moments()[i]);
  for (const LocalState& x : out)
    ZRT_ENFORCE(x.holdCount == 0 || x.data || (x.swap && v.io), "checkpoint: state '", x.name,
                "' has neither memory nor a swap file on this rank");
  return out;
}

// Swap files are read and written through the engine's I/O engine in chunks of this many bytes
// (a multiple of 4 KiB, so every chunk's offset suits O_DIRECT).
constexpr std::uint64_t kSwapChunk = 8 << 20;

// Elements [first, first + count) of a state held in a swap file (first counted from what the
// rank holds, and a multiple of 1024: the file's offsets stay 4 KiB-aligned), a chunk at a
// time: read(chunk values) for save, or write after fill(chunk) for load.
template <class Fn>
void forSwapChunks(const EngineView& v, const LocalState& s, std::uint64_t first, std::uint64_t count, bool load,
                   Fn&& fn) {
  const std::size_t es = dtypeSize(s.dtype);
  ZRT_ENFORCE((first * es) % 4096 == 0, "checkpoint: swap-file slice of '", s.name, "' at element ", first,
              " is not 4 KiB-aligned");
  offload::AlignedBuffer chunk(kSwapChunk);
  const std::uint64_t per = kSwapChunk / es;
  for (std::uint64_t done = 0; done < count; done += per) {
    const std::uint64_t n = std::min(per, count - done);
    const std::uint64_t offset = (first + done) * es;
    if (load) {
      fn(chunk.data(), done, n);
      v.io->writeSync(s.swap->file(), offset, chunk.data(), n * es);
    } else {
      v.io->readSync(s.swap->file(), offset, chunk.data(), n * es);
      fn(chunk.data(), done, n);
    }
  }
}

std::string fileName(const std::string& state, int rank) {
  char r[16];
  std::snprintf(r, sizeof r, "%05d", rank);
  return state + ".rank" + r + ".bin";
}

// Writes bytes to a new file in `dir`, fsyncs it and returns its manifest entry.
ManifestFile writeFile(const std::string& dir, const std::string& name, const void* data, std::uint64_t bytes) {
  ManifestFile f;
  f.path = name;
  f.bytes = bytes;
  File file = File::createExclusive(joinPath(dir, name));
  file.writeAll(data, bytes);
  file.sync();
  file.close();
  f.xxh3 = XXH3_64bits(data, bytes);
  return f;
}

// This rank's slice of every state: elements shardOf(numel, world, rank) of each flat buffer,
// whatever the stage, so the files of a save always split each buffer the same way.
std::vector<ManifestFile> writeShardFiles(const EngineView& v, const std::string& dir) {
  std::vector<ManifestFile> files;
  for (const LocalState& s : localStates(v)) {
    const ShardRange mine = shardOf(s.numel, v.world, v.rank, kShardAlignElements);
    if (mine.valid == 0) continue;
    ZRT_ENFORCE(mine.begin >= s.holdBegin && mine.begin + mine.valid <= s.holdBegin + s.holdCount,
                "checkpoint: rank ", v.rank, " does not hold its slice of '", s.name, "'");
    const std::size_t es = dtypeSize(s.dtype);
    ManifestFile f;
    if (s.data) {
      f = writeFile(dir, fileName(s.name, v.rank), s.data + (mine.begin - s.holdBegin) * es, mine.valid * es);
    } else {  // on NVMe: file to file, a chunk at a time, hashed as it goes
      f.path = fileName(s.name, v.rank);
      f.bytes = mine.valid * es;
      File file = File::createExclusive(joinPath(dir, f.path));
      XXH3_state_t* hash = XXH3_createState();
      ZRT_ENFORCE(hash != nullptr, "checkpoint: out of memory for a hash state");
      std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> owner(hash, &XXH3_freeState);
      XXH3_64bits_reset(hash);
      forSwapChunks(v, s, mine.begin - s.holdBegin, mine.valid, /*load=*/false,
                    [&](const std::byte* chunk, std::uint64_t, std::uint64_t n) {
                      file.writeAll(chunk, n * es);
                      XXH3_64bits_update(hash, chunk, n * es);
                    });
      file.sync();
      file.close();
      f.xxh3 = XXH3_64bits_digest(hash);
    }
    f.state = s.name;
    f.rank = v.rank;
    f.begin = mine.begin;
    f.count = mine.valid;
    files.push_back(std::move(f));
  }
  return files;
}

json engineStateJson(const EngineView& v) {
  const LossScaler::State s = v.scaler->state();
  return {{"optimizer_steps_attempted", *v.attempted},
          {"optimizer_steps_taken", *v.taken},
          {"micro_steps_done", v.micro},
          {"loss_scaler", {{"scale", s.scale}, {"iteration", s.iteration},
                           {"last_overflow_iteration", s.lastOverflowIteration},
                           {"hysteresis_left", s.hysteresisLeft}}},
          {"lr_scheduler", {{"position", *v.taken},
                            {"note", "the schedule is a function of optimizer_steps_taken"}}},
          {"rng", nullptr}};
}

Manifest manifestOf(const EngineView& v, const std::string& tag) {
  Manifest m;
  m.tag = tag;
  m.worldSize = v.world;
  m.stage = v.stage;
  m.dtype = v.dtype;
  m.optimizer = v.optimizer;
  m.trainableNumel = v.states->trainableLayout().numel;
  m.frozenNumel = v.states->frozenLayout().numel;
  for (const EngineView::Param& p : v.params)
    m.params.push_back({p.module, p.name, p.shape, p.trainable, p.group, p.offset, p.numel});
  for (const LocalState& s : localStates(v)) m.states.push_back({s.name, s.trainableBuffer, s.dtype, s.numel});
  return m;
}

// The part of [a, a + n) inside [b, b + m), as [lo, hi).
std::pair<std::uint64_t, std::uint64_t> overlap(std::uint64_t a, std::uint64_t n, std::uint64_t b, std::uint64_t m) {
  const std::uint64_t lo = std::max(a, b), hi = std::min(a + n, b + m);
  return {lo, std::max(lo, hi)};
}

// Checks the files `wanted` selects, each on one rank (file i on rank i % world), and agrees.
template <class Wanted>
void verifySpread(comm::Communicator& comm, const CheckpointReader& r, Wanted wanted) {
  Outcome o;
  std::string bad;
  for (std::size_t i = 0; i < r.manifest().files.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(comm.size())) != comm.rank()) continue;
    if (!wanted(r.manifest().files[i])) continue;
    const std::string problem = r.verifyFile(i);
    if (!problem.empty()) bad += (bad.empty() ? "" : "\n    ") + problem;
  }
  if (!bad.empty()) o = {Outcome::Kind::Io, bad};
  agree(comm, o, "checkpoint: " + r.dir() + " failed verification (nothing was loaded):");
}

// A parameter source for loadWeights: values of parameter `name` as a dtype, and as fp32 master.
struct WeightSource {
  std::string describe;
  std::function<bool(const EngineView::Param&)> has;  // false: absent (allowed), left as it is
  std::function<void(const EngineView::Param&, std::uint64_t, std::uint64_t, DType, void*)> values;
  std::function<void(const EngineView::Param&, std::uint64_t, std::uint64_t, float*)> master;
};

// Fills the parameters (and master weights) this rank holds from `src`.
void fillWeights(const EngineView& v, const WeightSource& src) {
  const std::vector<LocalState> states = localStates(v);
  const LocalState* trainable = &states[0];
  const LocalState* frozen = &states[1];
  const LocalState* master = nullptr;
  for (const LocalState& s : states)
    if (s.name == "master") master = &s;
  // A master on NVMe is filled in memory (weights-only loading happens once) and then written.
  std::vector<float> swapped;
  float* masterBase = master ? reinterpret_cast<float*>(master->data) : nullptr;
  if (master && !master->data) {
    swapped.assign(master->holdCount, 0.0f);
    masterBase = swapped.data();
  }
  for (const EngineView::Param& p : v.params) {
    if (!src.has(p)) continue;
    const LocalState& s = p.trainable ? *trainable : *frozen;
    const auto [lo, hi] = overlap(p.offset, p.numel, s.holdBegin, s.holdCount);
    if (hi > lo) src.values(p, lo - p.offset, hi - lo, v.dtype, s.data + (lo - s.holdBegin) * dtypeSize(v.dtype));
    if (!p.trainable || !master) continue;
    const auto [mlo, mhi] = overlap(p.offset, p.numel, master->holdBegin, master->holdCount);
    if (mhi > mlo)
      src.master(p, mlo - p.offset, mhi - mlo, masterBase + (mlo - master->holdBegin));
  }
  if (!swapped.empty())
    forSwapChunks(v, *master, 0, master->holdCount, /*load=*/true, [&](std::byte* chunk, std::uint64_t at, std::uint64_t n) {
      std::memcpy(chunk, swapped.data() + at, n * sizeof(float));
    });
}

}  // namespace

void save(const EngineView& v, const std::string& dir, const std::string& tag, const json& metadata) {
  comm::Communicator& comm = *v.comm;
  const std::string what = "checkpoint: cannot save '" + tag + "' in " + dir + ":";
  runAgreed(comm, what, [&] {
    checkTagName(tag);
    if (!metadata.is_object())
      ZRT_THROW(InvalidArgument, "checkpoint: metadata must be a JSON object, got ", metadata.type_name());
    if (v.inMicro || v.micro != 0)
      ZRT_THROW(InvalidArgument, "checkpoint: save between accumulation boundaries (", v.micro, " of ", v.accumulation,
                " micro-steps of this step done", v.inMicro ? ", one still open" : "",
                "): the partial gradients are not saved; save after step()");
  });

  // Rank 0 makes the temporary directory and tells the others its name.
  std::string tmp;
  Outcome made;
  if (v.rank == 0) {
    try {
      makeDirectory(dir);
      if (pathExists(joinPath(dir, tag)))
        ZRT_THROW(InvalidArgument, "checkpoint: ", joinPath(dir, tag), " exists; a checkpoint is never overwritten "
                  "(choose another tag or remove it)");
      removeStaleStaging(dir);
      tmp = makeTempDirectory(dir, tag + ".tmp-");
      try {
        claimStaging(tmp);
      } catch (...) {
        removeTree(tmp);
        throw;
      }
    } catch (const std::exception& e) {
      made = Outcome::of(e);
    }
  }
  agree(comm, made, what);
  tmp = comm::allGatherStrings(comm, v.rank == 0 ? tmp : std::string())[0];

  // Everything after this point removes the temporary directory on failure (rank 0 does it,
  // once every rank has stopped writing into it).
  auto cleanUp = [&] {
    if (v.rank != 0) return;
    const std::string left = removeTree(tmp);
    if (!left.empty()) logWarning("checkpoint: could not remove the temporary directory: " + left);
  };
  std::vector<ManifestFile> mine;
  Outcome wrote;
  try {
    mine = writeShardFiles(v, tmp);
    if (v.rank == 0) {
      const std::string text = engineStateJson(v).dump(2) + "\n";
      ManifestFile f = writeFile(tmp, kEngineStateName, text.data(), text.size());
      f.state = "engine";
      mine.push_back(std::move(f));
    }
  } catch (const std::exception& e) {
    wrote = Outcome::of(e);
  }
  try {
    agree(comm, wrote, what);
  } catch (...) {
    cleanUp();
    throw;
  }

  json list = json::array();
  for (const ManifestFile& f : mine) list.push_back(toJson(f));
  const std::vector<std::string> lists = comm::allGatherStrings(comm, list.dump());
  Outcome published;
  if (v.rank == 0) {
    bool renamed = false;
    try {
      Manifest m = manifestOf(v, tag);
      m.metadata = metadata;
      for (std::size_t r = 0; r < lists.size(); ++r)
        for (const json& f : json::parse(lists[r])) m.files.push_back(fileFromJson(f, "rank " + std::to_string(r) + "'s file list"));
      const json j = toJson(m);
      manifestFromJson(j, "the manifest being written");  // the reader's checks, before it is published
      const std::string text = j.dump(1) + "\n";
      writeFile(tmp, kManifestName, text.data(), text.size());
      syncDirectory(tmp);
      renameNoReplace(tmp, joinPath(dir, tag));
      renamed = true;
      releaseStaging(joinPath(dir, tag));
      syncDirectory(dir);
      replaceFileAtomically(dir, kLatestName, tag + "\n");
    } catch (const std::exception& e) {
      published = Outcome::of(e);
      if (!renamed) cleanUp();
      // The checkpoint itself is complete; only the pointer to it is not.
      if (renamed) published.message += "\n  (" + joinPath(dir, tag) + " is complete, but " + joinPath(dir, kLatestName) +
                                         " may still name the previous checkpoint)";
    }
  }
  agree(comm, published, what);
}

void load(const EngineView& v, const std::string& dir, const std::string& tag) {
  comm::Communicator& comm = *v.comm;
  std::unique_ptr<CheckpointReader> reader;
  const std::string what = "checkpoint: cannot load '" + tag + "' from " + dir + " (nothing was loaded):";
  runAgreed(comm, what, [&] {
    if (v.inMicro || v.micro != 0)
      ZRT_THROW(InvalidArgument, "checkpoint: load inside a step (", v.micro, " of ", v.accumulation,
                " micro-steps done); load before beginMicroStep or after step()");
    if (v.rank == 0) removeStaleStaging(dir);
    reader = std::make_unique<CheckpointReader>(joinPath(dir, resolveTag(dir, tag)));
    const std::vector<std::string> diffs = modelDifferences(reader->manifest(), v, /*exact=*/true);
    if (!diffs.empty()) throwDifferences(joinPath(reader->dir(), kManifestName), diffs);
  });
  verifySpread(comm, *reader, [](const ManifestFile&) { return true; });

  LossScaler::State scaler;
  std::int64_t attempted = 0, taken = 0;
  runAgreed(comm, what, [&] {
    const json e = reader->engineState();
    const std::string src = reader->dir() + "/" + kEngineStateName;
    // Integers exactly (json_integer.h): get<int>() would convert 1e300 or 4294967297 silently.
    auto integer = [&](const json& o, const char* key, auto type) {
      using T = decltype(type);
      if (const std::optional<T> x = exactInteger<T>(o.at(key))) return *x;
      ZRT_THROW(InvalidArgument, "checkpoint: ", src, ": '", key, "' is ", o.at(key).dump(), ", not an integer in range");
    };
    try {
      attempted = integer(e, "optimizer_steps_attempted", std::int64_t{});
      taken = integer(e, "optimizer_steps_taken", std::int64_t{});
      const json& s = e.at("loss_scaler");
      scaler.scale = s.at("scale").get<double>();
      scaler.iteration = integer(s, "iteration", std::int64_t{});
      scaler.lastOverflowIteration = integer(s, "last_overflow_iteration", std::int64_t{});
      scaler.hysteresisLeft = integer(s, "hysteresis_left", int{});
    } catch (const json::exception& x) {
      ZRT_THROW(InvalidArgument, "checkpoint: ", src, ": ", x.what());
    }
    if (attempted < 0 || taken < 0 || taken > attempted || !(scaler.scale > 0))
      ZRT_THROW(InvalidArgument, "checkpoint: ", src, ": step counters (", attempted, " attempted, ", taken,
                " taken) or loss scale ", scaler.scale, " are impossible");
  });

  runAgreed(comm, "checkpoint: loading " + reader->dir() + " failed part-way (the engine's state is now mixed; load again):", [&] {
    for (const LocalState& s : localStates(v)) {
      if (!s.holdCount) continue;
      if (s.data) {
        reader->read(s.name, s.holdBegin, s.holdCount, s.dtype, s.data);
      } else {
        forSwapChunks(v, s, 0, s.holdCount, /*load=*/true, [&](std::byte* chunk, std::uint64_t at, std::uint64_t n) {
          reader->read(s.name, s.holdBegin + at, n, s.dtype, chunk);
        });
      }
    }
  });
  v.scaler->restore(scaler);
  *v.attempted = attempted;
  *v.taken = taken;
  if (v.parametersChanged) v.parametersChanged();
}

// The tensors of a safetensors file that are another's tied name (zrt-ckpt export writes a tied
// parameter under each of its names and lists the extra ones in the metadata's zrt_tied, an
// object alias -> owner): each is its owner's copy, so only the owner is read. An alias whose
// owner the file lacks is read as a tensor of its own.
namespace {
std::set<std::string> tiedAliases(const SafetensorsReader& st, const std::string& path) {
  std::set<std::string> out;
  const auto it = st.metadata().find("zrt_tied");
  if (it == st.metadata().end()) return out;
  const json tied = json::parse(it->second, nullptr, false);
  if (!tied.is_object())
    ZRT_THROW(InvalidArgument, "checkpoint: ", path, ": metadata zrt_tied is not a JSON object: ", it->second);
  std::set<std::string> names;
  for (const SafetensorsTensor& t : st.tensors()) names.insert(t.name);
  for (const auto& [alias, owner] : tied.items())
    if (owner.is_string() && names.count(owner.get<std::string>())) out.insert(alias);
  return out;
}
}  // namespace

void loadWeights(const EngineView& v, const std::string& path, const std::vector<std::string>& mayBeMissing,
                 const std::function<std::string(const std::string&)>& rename) {
  comm::Communicator& comm = *v.comm;
  const std::string what = "checkpoint: cannot load weights from " + path + " (nothing was loaded):";
  std::unique_ptr<CheckpointReader> ckpt;
  std::unique_ptr<SafetensorsReader> st;
  std::map<std::string, const SafetensorsTensor*> tensorOf;  // the file's tensors by the engine's names
  runAgreed(comm, what, [&] {
    if (v.inMicro || v.micro != 0)
      ZRT_THROW(InvalidArgument, "checkpoint: loadWeights inside a step (", v.micro, " of ", v.accumulation, " micro-steps done)");
    if (isDirectory(path)) {
      const std::string dir = pathExists(joinPath(path, kManifestName)) ? path : joinPath(path, resolveTag(path, ""));
      ckpt = std::make_unique<CheckpointReader>(dir);
      const std::vector<std::string> diffs = modelDifferences(ckpt->manifest(), v, /*exact=*/false, mayBeMissing);
      if (!diffs.empty()) throwDifferences(joinPath(dir, kManifestName), diffs);
      return;
    }
    if (!pathExists(path)) ZRT_THROW(InvalidArgument, "checkpoint: ", path, " does not exist");
    st = std::make_unique<SafetensorsReader>(path);
    const std::set<std::string> tied = tiedAliases(*st, path);
    std::vector<NamedShape> source, engine;
    for (const SafetensorsTensor& t : st->tensors()) {
      if (tied.count(t.name)) continue;  // a copy of its owner, which is loaded
      std::string name = rename ? rename(t.name) : t.name;
      const auto [it, fresh] = tensorOf.emplace(name, &t);
      if (!fresh)
        ZRT_THROW(InvalidArgument, "checkpoint: ", path, ": tensors '", it->second->name, "' and '", t.name,
                  "' are both renamed to '", name, "'");
      source.push_back({std::move(name), t.shape});
    }
    std::set<std::string> optional;
    for (const EngineView::Param& p : v.params) {
      engine.push_back({safetensorsName(p.module, p.name), p.shape});
      if (std::find(mayBeMissing.begin(), mayBeMissing.end(), p.module + "/" + p.name) != mayBeMissing.end())
        optional.insert(safetensorsName(p.module, p.name));
    }
    const std::vector<std::string> diffs = nameDifferences(source, engine, "safetensors file", optional);
    if (!diffs.empty()) throwDifferences(path, diffs);
  });

  WeightSource src;
  if (ckpt) {
    verifySpread(comm, *ckpt, [](const ManifestFile& f) {
      return f.state == "params" || f.state == "frozen_params" || f.state == "master";
    });
    src.has = [&](const EngineView::Param& p) { return ckpt->manifest().param(p.module + "/" + p.name) != nullptr; };
    src.values = [&](const EngineView::Param& p, std::uint64_t b, std::uint64_t n, DType t, void* out) {
      ckpt->readParameter(*ckpt->manifest().param(p.module + "/" + p.name), b, n, t, out);
    };
    src.master = [&](const EngineView::Param& p, std::uint64_t b, std::uint64_t n, float* out) {
      ckpt->readParameterMaster(*ckpt->manifest().param(p.module + "/" + p.name), b, n, out);
    };
  } else {
    src.has = [&](const EngineView::Param& p) { return tensorOf.count(safetensorsName(p.module, p.name)) != 0; };
    src.values = [&](const EngineView::Param& p, std::uint64_t b, std::uint64_t n, DType t, void* out) {
      st->read(*tensorOf.at(safetensorsName(p.module, p.name)), b, n, t, out);
    };
    src.master = [&](const EngineView::Param& p, std::uint64_t b, std::uint64_t n, float* out) {
      st->read(*tensorOf.at(safetensorsName(p.module, p.name)), b, n, DType::F32, out);
    };
  }
  runAgreed(comm, "checkpoint: loading weights from " + path + " failed part-way (the parameters are now mixed):",
            [&] { fillWeights(v, src); });
  if (v.parametersChanged) v.parametersChanged();
}

}  // namespace zrt::checkpoint

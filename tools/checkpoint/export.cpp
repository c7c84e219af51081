#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "lora_export.h"
#include "core/error.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/file_io.h"
#include "runtime/checkpoint/safetensors.h"

namespace zrt::ckpt_tool {
namespace {

// Writes `content` as the new file `path` (never replacing one): to `<path>.tmp-<pid>`, created
// exclusively, then renamed into place; a failure removes the temporary file only if it made it.
void writeNew(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  checkpoint::File f = checkpoint::File::createExclusive(tmp);
  try {
    f.writeAll(content.data(), content.size());
    f.sync();
    f.close();
    checkpoint::renameNoReplace(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The adapter directory of --trainable-only, made as PEFT's save_pretrained makes it: an existing
// directory is used, a missing one is created with its missing parents (mode 0700, as
// checkpoints). Anything else at the path (a file, a link, even to a directory) is refused.
// Returns the directories it created, outermost first, for removal should the export fail.
std::vector<std::string> makeAdapterDirectory(const std::string& dir) {
  std::vector<std::string> missing;
  std::string whole = std::filesystem::absolute(dir).lexically_normal().string();
  while (whole.size() > 1 && whole.back() == '/') whole.pop_back();
  for (std::filesystem::path p = whole; !p.empty(); p = p.parent_path()) {
    const std::string s = p.string();
    if (checkpoint::pathExists(s)) {
      // The directory itself must not be a link (the files are never written through one); a
      // link among its parents is followed, as any path is.
      struct stat st {};
      const bool dirOk = s == whole ? checkpoint::isDirectory(s)
                                    : ::stat(s.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
      if (!dirOk)
        ZRT_THROW(InvalidArgument, "zrt-ckpt: --out ", dir, ": ", s,
                  " exists and is not a directory", s == whole ? " (or is a link)" : "");
      break;
    }
    missing.insert(missing.begin(), s);
    if (p == p.parent_path()) break;
  }
  std::vector<std::string> created;
  for (const std::string& s : missing) {
    if (::mkdir(s.c_str(), 0700) != 0) {
      const int e = errno;
      for (auto it = created.rbegin(); it != created.rend(); ++it) ::rmdir(it->c_str());
      ZRT_THROW(IoError, "zrt-ckpt: cannot create directory ", s, ": ", std::strerror(e));
    }
    created.push_back(s);
  }
  return created;
}

}  // namespace

int exportSafetensors(const std::string& path, const std::string& tag, const ExportOptions& o) {
  const std::vector<std::string> dirs = locate(path, tag, false);
  const checkpoint::CheckpointReader r(dirs.at(0));
  const checkpoint::Manifest& m = r.manifest();

  // The files the export reads are verified first, so a damaged checkpoint never exports.
  int bad = 0;
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const auto& f = m.files[i];
    if (f.state != "params" && f.state != "frozen_params" && f.state != "master") continue;
    const std::string problem = r.verifyFile(i);
    if (!problem.empty()) {
      std::cerr << "zrt-ckpt: BAD " << problem << "\n";
      ++bad;
    }
  }
  if (bad) {
    std::cerr << "zrt-ckpt: not exported: " << bad << " damaged file(s) in " << r.dir() << "\n";
    return 1;
  }

  const std::optional<LoraInfo> lora = loraInfoOf(m, r.dir());
  if (o.merge && !lora)
    ZRT_THROW(InvalidArgument, "zrt-ckpt: ", r.dir(), " has no LoRA adapters to merge (its manifest's metadata has no "
              "'lora' entry; zrt-train --lora-rank writes one)");

  // --trainable-only writes PEFT's adapter directory: --out is the directory (save_pretrained's
  // save_directory), holding adapter_model.safetensors and adapter_config.json.
  std::string out = o.out, configPath;
  if (o.trainableOnly) {
    if (checkpoint::pathExists(o.out) && !checkpoint::isDirectory(o.out))
      ZRT_THROW(InvalidArgument, "zrt-ckpt: --out ", o.out,
                " exists and is not a directory (or is a link): "
                "--trainable-only writes an adapter directory (adapter_model.safetensors and "
                "adapter_config.json)");
    if (!checkpoint::pathExists(o.out) && endsWith(o.out, ".safetensors"))
      ZRT_THROW(InvalidArgument, "zrt-ckpt: --out ", o.out,
                " names a file, but --trainable-only writes an adapter directory as PEFT's "
                "save_pretrained does (adapter_model.safetensors and adapter_config.json in it): "
                "give the directory");
    out = checkpoint::joinPath(o.out, "adapter_model.safetensors");
    configPath = checkpoint::joinPath(o.out, "adapter_config.json");
  }
  for (const std::string& target : {out, configPath})
    if (!target.empty() && checkpoint::pathExists(target))
      ZRT_THROW(InvalidArgument, "zrt-ckpt: ", target, " exists; not overwritten");
  const std::filesystem::path parent = std::filesystem::absolute(out).parent_path();

  // What to write: each tensor's header entry and how its values are produced.
  std::vector<checkpoint::SafetensorsTensor> tensors;
  std::vector<std::function<void(char*)>> fill;
  std::set<std::string> modules;
  std::map<const checkpoint::ManifestParam*, FoldPlan> folds;
  if (o.merge)
    for (const FoldPlan& f : planFolds(m, *lora)) folds[f.base] = f;
  for (const checkpoint::ManifestParam& p : m.params) {
    if (o.trainableOnly && !p.trainable) continue;
    if (o.merge && isAdapterName(p.name)) continue;
    // Under a LoRA program's names (PEFT's for the adapter file, the base model's for a merge)
    // when the metadata gives them; else "<module>.<param>", which Engine::loadWeights reads.
    std::string name = checkpoint::safetensorsName(p.module, p.name);
    if (lora && o.trainableOnly) name = lora->adapterNamePrefix + p.name;
    if (lora && o.merge && lora->baseNamePrefix) name = *lora->baseNamePrefix + p.name;
    tensors.push_back({name, o.dtype, p.shape, 0, 0});
    modules.insert(p.module);
    const auto fold = folds.find(&p);
    if (fold == folds.end()) {
      fill.push_back([&r, &p, dtype = o.dtype](char* buf) { r.readParameter(p, 0, p.numel, dtype, buf); });
      continue;
    }
    fill.push_back([&r, f = fold->second, s = *lora, dtype = o.dtype](char* buf) {
      std::vector<float> w(f.base->numel), a(f.a->numel), b(f.b->numel);
      r.readParameter(*f.base, 0, f.base->numel, DType::F32, w.data());
      r.readParameter(*f.a, 0, f.a->numel, DType::F32, a.data());
      r.readParameter(*f.b, 0, f.b->numel, DType::F32, b.data());
      const std::int64_t in = f.a->shape[1], outF = f.b->shape[0];
      foldAdapter(w.data(), a.data(), b.data(), in, outF, s.r, s.scaling(), s.fanInFanOut);
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (dtype == DType::F32) {
          std::memcpy(buf + 4 * i, &w[i], 4);
        } else {
          const std::uint16_t h = dtype == DType::BF16 ? floatToBf16(w[i]) : floatToHalf(w[i]);
          std::memcpy(buf + 2 * i, &h, 2);
        }
      }
    });
  }
  if (tensors.empty())
    ZRT_THROW(InvalidArgument, "zrt-ckpt: ", r.dir(), " has no ", o.trainableOnly ? "trainable " : "", "parameters to export");
  // A tied parameter (the program's metadata.tied: each extra name -> the owner's
  // "<module>.<param>") is stored once in the checkpoint and exported under each of the model's
  // names, as the model's state_dict lists it; the extra names are listed in the file's
  // zrt_tied, so Engine::loadWeights reads the owner only.
  nlohmann::json tiedWritten = nlohmann::json::object();
  if (m.metadata.contains("tied") && !o.trainableOnly && !o.merge) {
    const nlohmann::json& tied = m.metadata.at("tied");
    if (!tied.is_object())
      ZRT_THROW(InvalidArgument, "zrt-ckpt: ", r.dir(), ": metadata.tied is not a JSON object");
    const std::size_t owners = tensors.size();
    for (const auto& [alias, owner] : tied.items()) {
      std::size_t at = 0;
      while (at < owners && (!owner.is_string() || tensors[at].name != owner.get<std::string>())) ++at;
      if (at == owners)
        ZRT_THROW(InvalidArgument, "zrt-ckpt: ", r.dir(), ": metadata.tied names ", alias, " a tie of ", owner.dump(),
                  ", which the checkpoint does not hold");
      tensors.push_back({alias, o.dtype, tensors[at].shape, 0, 0});
      std::function<void(char*)> same = fill[at];
      fill.push_back(std::move(same));
      tiedWritten[alias] = owner;
    }
  }

  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"zrt_checkpoint", r.dir()}, {"zrt_tag", m.tag},
                                                 {"zrt_training_dtype", std::string(nameOf(m.dtype))}};
  if (!tiedWritten.empty()) metadata["zrt_tied"] = tiedWritten.dump();
  if (lora && o.trainableOnly && m.metadata.contains("model"))
    metadata["zrt_model"] = m.metadata.at("model").dump();
  if (o.merge) {
    metadata["zrt_merged_lora"] = nlohmann::json{{"r", lora->r}, {"lora_alpha", lora->alpha},
                                                 {"target_modules", lora->targetModules},
                                                 {"adapters_folded", folds.size()}}.dump();
    if (m.metadata.contains("model")) metadata["zrt_model"] = m.metadata.at("model").dump();
  }

  // The adapter's configuration (PEFT's LoraConfig keys only: PEFT refuses a key it does not
  // know, so where the export came from is in the safetensors metadata). Without the training
  // program's LoRA metadata ZRT knows which modules train but not the adapter's rank or alpha:
  // those keys are left null to fill.
  std::string config;
  if (o.trainableOnly)
    config = (lora ? adapterConfig(*lora)
                   : nlohmann::json{{"peft_type", "LORA"},
                                    {"base_model_name_or_path", nullptr},
                                    {"target_modules",
                                     std::vector<std::string>(modules.begin(), modules.end())},
                                    {"inference_mode", true},
                                    {"r", nullptr},
                                    {"lora_alpha", nullptr}})
                 .dump(2) +
             "\n";

  // Written beside the target and renamed into place, so a reader never sees half a file. The
  // writer creates the temporary name exclusively and never through a link; when it cannot,
  // whatever holds that name is not ours and stays (the error names it). A failure removes only
  // what this export made: its temporary file, an adapter file it renamed into place, the
  // directories it created (rmdir, so only while empty).
  const std::vector<std::string> createdDirs =
      o.trainableOnly ? makeAdapterDirectory(o.out) : std::vector<std::string>();
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  std::uint64_t bytes = 0;
  bool placed = false;
  try {
    checkpoint::SafetensorsWriter w(tmp, tensors, metadata);
    try {
      std::vector<char> buf;
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        buf.resize(tensors[i].numel() * dtypeSize(o.dtype));
        fill[i](buf.data());
        w.write(buf.data(), buf.size());
        bytes += buf.size();
      }
      w.finish();
      checkpoint::renameNoReplace(tmp, out);
      placed = true;
    } catch (...) {
      std::remove(tmp.c_str());  // ours: the writer created it exclusively
      throw;
    }
    if (o.trainableOnly) writeNew(configPath, config);
    checkpoint::syncDirectory(parent.string());
    if (!createdDirs.empty())
      checkpoint::syncDirectory(std::filesystem::path(createdDirs.front()).parent_path().string());
  } catch (...) {
    if (placed && o.trainableOnly) std::remove(out.c_str());
    for (auto it = createdDirs.rbegin(); it != createdDirs.rend(); ++it) ::rmdir(it->c_str());
    throw;
  }
  std::cout << "exported " << tensors.size() << " tensors (" << bytes << " bytes of " << nameOf(o.dtype) << ") from "
            << r.dir() << " to " << out;
  if (o.merge) std::cout << ", " << folds.size() << " adapters folded in (scaling " << lora->scaling() << ")";
  std::cout << "\n";
  return 0;
}

}  // namespace zrt::ckpt_tool

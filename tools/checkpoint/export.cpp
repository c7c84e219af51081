#include <unistd.h>

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

// Writes `content` as a new file (never replacing one).
void writeNew(const std::string& path, const std::string& content) {
  checkpoint::File f = checkpoint::File::createExclusive(path);
  f.writeAll(content.data(), content.size());
  f.sync();
  f.close();
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

  std::string out = o.out;
  if (o.trainableOnly && (checkpoint::isDirectory(out) || out.back() == '/'))
    out = checkpoint::joinPath(out, "adapter_model.safetensors");
  if (checkpoint::pathExists(out)) ZRT_THROW(InvalidArgument, "zrt-ckpt: ", out, " exists; not overwritten");
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

  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"zrt_checkpoint", r.dir()}, {"zrt_tag", m.tag},
                                                 {"zrt_training_dtype", std::string(nameOf(m.dtype))}};
  if (o.merge) {
    metadata["zrt_merged_lora"] = nlohmann::json{{"r", lora->r}, {"lora_alpha", lora->alpha},
                                                 {"target_modules", lora->targetModules},
                                                 {"adapters_folded", folds.size()}}.dump();
    if (m.metadata.contains("model")) metadata["zrt_model"] = m.metadata.at("model").dump();
  }

  // Written beside the target and renamed into place, so a reader never sees half a file. The
  // writer creates the temporary name exclusively and never through a link; when it cannot,
  // whatever holds that name is not ours and stays (the error names it).
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  std::uint64_t bytes = 0;
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
    checkpoint::syncDirectory(parent.string());
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (o.trainableOnly) {
    // The LoRA adapter layout (PEFT). Without the training program's LoRA metadata ZRT knows
    // which modules train but not the adapter's rank or alpha: those keys are left null to fill.
    nlohmann::json config =
        lora ? adapterConfig(*lora, m, r.dir(), tensors.size())
             : nlohmann::json{{"peft_type", "LORA"},
                              {"base_model_name_or_path", nullptr},
                              {"target_modules", std::vector<std::string>(modules.begin(), modules.end())},
                              {"inference_mode", true},
                              {"r", nullptr},
                              {"lora_alpha", nullptr},
                              {"zrt", {{"checkpoint", r.dir()}, {"tag", m.tag}, {"tensors", tensors.size()}}}};
    writeNew((parent / "adapter_config.json").string(), config.dump(2) + "\n");
  }
  std::cout << "exported " << tensors.size() << " tensors (" << bytes << " bytes of " << nameOf(o.dtype) << ") from "
            << r.dir() << " to " << out;
  if (o.merge) std::cout << ", " << folds.size() << " adapters folded in (scaling " << lora->scaling() << ")";
  std::cout << "\n";
  return 0;
}

}  // namespace zrt::ckpt_tool

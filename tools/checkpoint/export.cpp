#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "commands.h"
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

  std::string out = o.out;
  if (o.trainableOnly && (checkpoint::isDirectory(out) || out.back() == '/'))
    out = checkpoint::joinPath(out, "adapter_model.safetensors");
  if (checkpoint::pathExists(out)) ZRT_THROW(InvalidArgument, "zrt-ckpt: ", out, " exists; not overwritten");
  const std::filesystem::path parent = std::filesystem::absolute(out).parent_path();

  std::vector<checkpoint::SafetensorsTensor> tensors;
  std::vector<const checkpoint::ManifestParam*> params;
  std::set<std::string> modules;
  for (const checkpoint::ManifestParam& p : m.params) {
    if (o.trainableOnly && !p.trainable) continue;
    tensors.push_back({checkpoint::safetensorsName(p.module, p.name), o.dtype, p.shape, 0, 0});
    params.push_back(&p);
    modules.insert(p.module);
  }
  if (tensors.empty())
    ZRT_THROW(InvalidArgument, "zrt-ckpt: ", r.dir(), " has no ", o.trainableOnly ? "trainable " : "", "parameters to export");

  // Written beside the target and renamed into place, so a reader never sees half a file.
  const std::string tmp = out + ".tmp-" + std::to_string(::getpid());
  std::uint64_t bytes = 0;
  try {
    checkpoint::SafetensorsWriter w(tmp, tensors,
                                    {{"format", "pt"}, {"zrt_checkpoint", r.dir()}, {"zrt_tag", m.tag},
                                     {"zrt_training_dtype", std::string(nameOf(m.dtype))}});
    std::vector<char> buf;
    for (const checkpoint::ManifestParam* p : params) {
      buf.resize(p->numel * dtypeSize(o.dtype));
      r.readParameter(*p, 0, p->numel, o.dtype, buf.data());
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
    // The LoRA adapter layout (PEFT): ZRT knows which modules train but not the adapter's rank
    // or alpha, which the training program chose; those keys are left for it to fill.
    nlohmann::json config = {{"peft_type", "LORA"},
                             {"base_model_name_or_path", nullptr},
                             {"target_modules", std::vector<std::string>(modules.begin(), modules.end())},
                             {"inference_mode", true},
                             {"r", nullptr},
                             {"lora_alpha", nullptr},
                             {"zrt", {{"checkpoint", r.dir()}, {"tag", m.tag}, {"tensors", tensors.size()}}}};
    writeNew((parent / "adapter_config.json").string(), config.dump(2) + "\n");
  }
  std::cout << "exported " << tensors.size() << " tensors (" << bytes << " bytes of " << nameOf(o.dtype) << ") from "
            << r.dir() << " to " << out << "\n";
  return 0;
}

}  // namespace zrt::ckpt_tool

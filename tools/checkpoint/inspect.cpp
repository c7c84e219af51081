#include <cstdio>
#include <iostream>
#include <map>

#include "commands.h"
#include "core/units.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/file_io.h"

namespace zrt::ckpt_tool {
namespace {

void summary(const std::string& dir) {
  const checkpoint::CheckpointReader r(dir);
  const checkpoint::Manifest& m = r.manifest();
  std::cout << "checkpoint " << dir << "\n"
            << "  tag " << m.tag << ", format " << checkpoint::kFormatName << " version " << m.formatVersion << "\n"
            << "  saved by " << m.worldSize << " rank(s) at ZeRO stage " << m.stage << ", training dtype "
            << nameOf(m.dtype) << ", optimizer " << m.optimizer << "\n";
  try {
    const auto e = r.engineState();
    std::cout << "  optimizer steps: " << e.at("optimizer_steps_attempted") << " attempted, "
              << e.at("optimizer_steps_taken") << " taken; loss scale " << e.at("loss_scaler").at("scale") << "\n";
  } catch (const std::exception& x) {
    std::cout << "  engine state unreadable: " << x.what() << "\n";
  }
  if (m.metadata.contains("lora")) {
    const auto& l = m.metadata.at("lora");
    std::cout << "  LoRA adapters: r " << l.value("r", nlohmann::json()).dump() << ", lora_alpha "
              << l.value("lora_alpha", nlohmann::json()).dump() << " on "
              << l.value("target_modules", nlohmann::json()).dump() << "; base "
              << l.value("base_model_name_or_path", nlohmann::json()).dump() << "\n";
  }
  std::size_t trainable = 0;
  for (const auto& p : m.params) trainable += p.trainable ? 1 : 0;
  std::cout << "  parameters: " << m.params.size() << " tensors (" << trainable << " trainable, "
            << m.trainableNumel << " elements; " << m.params.size() - trainable << " frozen, " << m.frozenNumel
            << " elements)\n";
  // Every state lives in files on disk today (the NVMe tier of offload, issue 17, would add a
  // column here).
  std::printf("  %-16s %-5s %-5s %14s %14s %6s\n", "state", "tier", "dtype", "elements", "bytes", "files");
  std::uint64_t total = 0;
  for (const auto& s : m.states) {
    std::uint64_t bytes = 0, files = 0;
    for (const auto& f : m.files)
      if (f.state == s.name) {
        bytes += f.bytes;
        ++files;
      }
    total += bytes;
    std::printf("  %-16s %-5s %-5s %14llu %14llu %6llu\n", s.name.c_str(), "disk", std::string(nameOf(s.dtype)).c_str(),
                static_cast<unsigned long long>(s.numel), static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(files));
  }
  for (const auto& f : m.files)
    if (f.state == "engine") total += f.bytes;
  std::cout << "  total: " << formatBytes(total) << " in " << m.files.size() << " files (and "
            << checkpoint::kManifestName << ")\n";
}

}  // namespace

int inspect(const std::string& path, const std::string& tag, bool all) {
  if (!checkpoint::pathExists(checkpoint::joinPath(path, checkpoint::kManifestName))) {
    const Listing l = list(path);
    std::cout << path << ": " << l.tags.size() << " checkpoint(s)";
    if (!l.latest.empty()) std::cout << ", latest " << l.latest;
    std::cout << "\n";
    for (const std::string& t : l.tags) std::cout << "  " << t << (t == l.latest ? "  (latest)" : "") << "\n";
    for (const std::string& t : l.temporaries)
      std::cout << "  " << t << "  (an unfinished save; safe to delete when no save is running)\n";
    if (l.tags.empty()) return 0;
  }
  for (const std::string& d : locate(path, tag, all)) summary(d);
  return 0;
}

}  // namespace zrt::ckpt_tool

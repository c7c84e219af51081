#include <iostream>
#include <memory>

#include "commands.h"
#include "runtime/checkpoint/checkpoint_reader.h"

namespace zrt::ckpt_tool {

int verify(const std::string& path, const std::string& tag, bool all) {
  int bad = 0;
  for (const std::string& dir : locate(path, tag, all)) {
    std::unique_ptr<checkpoint::CheckpointReader> r;
    try {
      r = std::make_unique<checkpoint::CheckpointReader>(dir);
    } catch (const std::exception& e) {
      std::cout << "BAD  " << dir << "/" << checkpoint::kManifestName << ": " << e.what() << "\n";
      ++bad;
      continue;
    }
    int badHere = 0;
    for (std::size_t i = 0; i < r->manifest().files.size(); ++i) {
      const std::string problem = r->verifyFile(i);
      if (problem.empty()) continue;
      std::cout << "BAD  " << problem << "\n";
      ++badHere;
    }
    std::cout << (badHere ? "FAILED " : "ok     ") << dir << ": " << r->manifest().files.size() - static_cast<std::size_t>(badHere)
              << " of " << r->manifest().files.size() << " files match their xxh3 checksums\n";
    bad += badHere;
  }
  return bad ? 1 : 0;
}

}  // namespace zrt::ckpt_tool

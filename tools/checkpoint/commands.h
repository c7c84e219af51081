// The zrt-ckpt subcommands, one file each. Each prints to stdout and returns the exit status:
// 0 fine, 1 a checkpoint that fails verification or an I/O error, 2 bad input (thrown as
// InvalidArgument and reported by main).
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"

namespace zrt::ckpt_tool {

// The checkpoints a path names: <dir>/<tag> itself (it holds manifest.json), or in a directory
// of checkpoints the tag asked for, "latest" by default, or every tag with `all`.
std::vector<std::string> locate(const std::string& path, const std::string& tag, bool all);
// Tags (complete checkpoints) and leftover temporary directories under a directory of them.
struct Listing {
  std::vector<std::string> tags;
  std::vector<std::string> temporaries;
  std::string latest;  // "" when there is no latest pointer
};
Listing list(const std::string& dir);

int inspect(const std::string& path, const std::string& tag, bool all);
int verify(const std::string& path, const std::string& tag, bool all);

struct ExportOptions {
  std::string out;
  DType dtype = DType::F32;
  bool trainableOnly = false;
  bool merge = false;  // LoRA adapters folded into their base weights, adapters not written
};
int exportSafetensors(const std::string& path, const std::string& tag, const ExportOptions& o);

}  // namespace zrt::ckpt_tool

#include <algorithm>
#include <filesystem>

#include "commands.h"
#include "core/error.h"
#include "runtime/checkpoint/checkpoint_reader.h"
#include "runtime/checkpoint/file_io.h"

namespace zrt::ckpt_tool {

Listing list(const std::string& dir) {
  Listing l;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || e.is_symlink()) continue;
    if (name.find(".tmp-") != std::string::npos)
      l.temporaries.push_back(name);
    else if (checkpoint::pathExists(e.path().string() + "/" + checkpoint::kManifestName))
      l.tags.push_back(name);
  }
  if (ec) ZRT_THROW(IoError, "zrt-ckpt: cannot list ", dir, ": ", ec.message());
  std::sort(l.tags.begin(), l.tags.end());
  std::sort(l.temporaries.begin(), l.temporaries.end());
  if (checkpoint::pathExists(checkpoint::joinPath(dir, checkpoint::kLatestName)))
    l.latest = checkpoint::resolveTag(dir, "");
  return l;
}

std::vector<std::string> locate(const std::string& path, const std::string& tag, bool all) {
  if (!checkpoint::isDirectory(path)) ZRT_THROW(InvalidArgument, "zrt-ckpt: ", path, " is not a directory");
  if (checkpoint::pathExists(checkpoint::joinPath(path, checkpoint::kManifestName))) {
    if (!tag.empty()) ZRT_THROW(InvalidArgument, "zrt-ckpt: ", path, " is one checkpoint; --tag picks one in a directory of them");
    return {path};
  }
  if (all) {
    std::vector<std::string> out;
    for (const std::string& t : list(path).tags) out.push_back(checkpoint::joinPath(path, t));
    if (out.empty()) ZRT_THROW(InvalidArgument, "zrt-ckpt: ", path, " holds no checkpoint");
    return out;
  }
  return {checkpoint::joinPath(path, checkpoint::resolveTag(path, tag))};
}

}  // namespace zrt::ckpt_tool

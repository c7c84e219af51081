#include "runtime/checkpoint/staging.h"

#include <dirent.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "runtime/checkpoint/file_io.h"

namespace zrt::checkpoint {
namespace {

constexpr const char* kOwnerName = "zrt-staging-owner.json";

std::string firstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// Field 22 of /proc/<pid>/stat (the process's start, in clock ticks after boot), or "" when the
// process does not exist. The command name (field 2) may hold spaces and parentheses: the fields
// after it follow the last ')'.
std::string startTimeOf(long pid) {
  const std::string stat = firstLine("/proc/" + std::to_string(pid) + "/stat");
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return field;
}

nlohmann::json me() {
  return {{"host", hostName()},
          {"boot_id", firstLine("/proc/sys/kernel/random/boot_id")},
          {"pid", static_cast<long>(::getpid())},
          {"start", startTimeOf(::getpid())}};
}

// Whether the owner `o` is certainly gone; `why` says what was found either way.
bool ownerGone(const nlohmann::json& o, std::string& why) {
  const nlohmann::json self = me();
  if (o.value("host", "") != self["host"].get<std::string>()) {
    why = "its owner is on host '" + o.value("host", "") + "'";
    return false;
  }
  if (o.value("boot_id", "") != self["boot_id"].get<std::string>()) {
    why = "its owner ran before this host's last boot";
    return true;
  }
  const long pid = o.value("pid", 0L);
  if (pid <= 0) {
    why = "its owner file names no process";
    return false;
  }
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
    why = "its owner, process " + std::to_string(pid) + ", has exited";
    return true;
  }
  if (startTimeOf(pid) != o.value("start", "")) {
    why = "process " + std::to_string(pid) + " is not its owner (started at another time)";
    return true;
  }
  why = "its owner, process " + std::to_string(pid) + ", is running";
  return false;
}

}  // namespace

void claimStaging(const std::string& staging) { replaceFileAtomically(staging, kOwnerName, me().dump() + "\n"); }

void releaseStaging(const std::string& checkpoint) { std::remove(joinPath(checkpoint, kOwnerName).c_str()); }

std::vector<std::string> removeStaleStaging(const std::string& dir) {
  std::vector<std::string> removed;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return removed;
  std::vector<std::string> staging;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    const std::size_t at = name.rfind(".tmp-");
    if (at == std::string::npos || at == 0 || name.size() != at + 5 + 6) continue;
    if (isDirectory(joinPath(dir, name))) staging.push_back(joinPath(dir, name));  // not latest.tmp-*
  }
  for (const std::string& path : staging) {
    // Empty: a save killed between making it and claiming it (rmdir removes only an empty one,
    // so a claim written meanwhile keeps it).
    if (::rmdir(path.c_str()) == 0) {
      logInfo("checkpoint: removed the empty staging directory " + path + " of an unfinished save");
      removed.push_back(path);
      continue;
    }
    const std::string owner = joinPath(path, kOwnerName);
    std::string why = "it has no owner file (" + std::string(kOwnerName) + ")";
    bool gone = false;
    if (pathExists(owner)) {
      std::string text;
      try {
        text = readSmallFile(owner, 4096);
      } catch (const std::exception&) {
      }
      const nlohmann::json o = nlohmann::json::parse(text, nullptr, false);
      if (o.is_object()) gone = ownerGone(o, why);
      else why = "its owner file is not JSON";
    }
    if (!gone) {
      logWarning("checkpoint: left the staging directory " + path + " of an unfinished save: " + why);
      continue;
    }
    const std::string left = removeTree(path);
    if (!left.empty()) {
      logWarning("checkpoint: could not remove the stale staging directory " + path + " (" + why + "): " + left);
      continue;
    }
    logInfo("checkpoint: removed the staging directory " + path + " of an unfinished save: " + why);
    removed.push_back(path);
  }
  return removed;
}

}  // namespace zrt::checkpoint

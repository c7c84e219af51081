#include "tools/plan/io_result.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace zrt::plan {

NvmeBandwidth parseIoResults(const std::string& text, const std::string& source) {
  double read = 0, write = 0, rw = 0;
  std::istringstream lines(text);
  int lineNo = 0;
  for (std::string line; std::getline(lines, line);) {
    ++lineNo;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      ZRT_THROW(InvalidArgument, "--nvme-bench: ", source, ":", lineNo,
                ": not a JSON object (zrt-io --json writes one per line): ", e.what());
    }
    if (!j.is_object() || !j.contains("mode") || !j["mode"].is_string() || !j.contains("gbps") ||
        !j["gbps"].is_number() || j["gbps"].get<double>() <= 0) {
      ZRT_THROW(InvalidArgument, "--nvme-bench: ", source, ":", lineNo,
                ": expected a zrt-io result with \"mode\" and a positive \"gbps\"");
    }
    const std::string mode = j["mode"].get<std::string>();
    const double bps = j["gbps"].get<double>() * 1e9;
    if (mode == "read") read = std::max(read, bps);
    else if (mode == "write") write = std::max(write, bps);
    else if (mode == "rw") rw = std::max(rw, bps);
    else
      ZRT_THROW(InvalidArgument, "--nvme-bench: ", source, ":", lineNo, ": unknown mode '", mode,
                "' (expected read, write or rw)");
  }
  if (read == 0) read = rw;
  if (write == 0) write = rw;
  if (read == 0 || write == 0) {
    ZRT_THROW(InvalidArgument, "--nvme-bench: ", source, ": needs at least one read and one write ",
              "result (or an rw result); found read ", read > 0 ? "yes" : "no", ", write ",
              write > 0 ? "yes" : "no");
  }
  NvmeBandwidth b;
  b.readBps = read;
  b.writeBps = write;
  char buf[128];
  std::snprintf(buf, sizeof buf, "read %.2f GB/s, write %.2f GB/s", read / 1e9, write / 1e9);
  b.source = "zrt-io " + source + ": " + buf;
  return b;
}

NvmeBandwidth readIoResults(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) ZRT_THROW(InvalidArgument, "--nvme-bench: cannot open '", file.string(), "'");
  std::stringstream text;
  text << in.rdbuf();
  return parseIoResults(text.str(), file.string());
}

}  // namespace zrt::plan

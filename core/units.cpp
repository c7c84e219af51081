#include "core/units.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace zrt {

std::uint64_t parseBytes(std::string_view text, std::string_view what) {
  std::string s(text);
  auto bad = [&]() {
    ZRT_THROW(InvalidArgument, "bad ", what, " '", text,
              "': expected a byte count such as 4096, 64K, 1.5G or 2e8");
  };
  if (s.empty()) bad();
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !std::isfinite(value) || value < 0) bad();
  std::string suffix(end);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.ends_with("IB")) suffix.resize(suffix.size() - 2);
  else if (suffix.size() > 1 && suffix.ends_with("B")) suffix.resize(suffix.size() - 1);
  else if (suffix == "B") suffix.clear();
  double mult = 1;
  if (suffix.empty()) mult = 1;
  else if (suffix == "K") mult = 1024.0;
  else if (suffix == "M") mult = 1024.0 * 1024;
  else if (suffix == "G") mult = 1024.0 * 1024 * 1024;
  else if (suffix == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else bad();
  double bytes = value * mult;
  if (bytes > 1.8e19 || bytes != std::floor(bytes)) bad();
  return static_cast<std::uint64_t>(bytes);
}

std::string formatBytes(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return detail::cat(bytes, " B");
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace zrt

// Helpers for config tests: parse text and return the ConfigError message (or fail the test).
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "core/config/config.h"

namespace zrt::test {

inline const char* kBadSource = "bad.json";

// The what() of the ConfigError that parsing `text` throws; fails the test when none is thrown.
inline std::string configErrorOf(const std::string& text, int worldSize = 1,
                                 const ConfigOverrides& overrides = {}) {
  try {
    parseConfig(text, kBadSource, worldSize, overrides);
  } catch (const ConfigError& e) {
    CHECK(e.source() == kBadSource);
    return e.what();
  }
  FAIL_CHECK("no ConfigError for: " << text);
  return "";
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline std::string shippedConfig(const std::string& name) {
  return std::string(ZRT_SOURCE_DIR) + "/configs/" + name;
}

}  // namespace zrt::test

#include "text_data.h"

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "batches.h"
#include "core/error.h"

namespace zrt::trainer {

std::size_t trainSplit(std::size_t length) { return length / 10 * 9 + length % 10 * 9 / 10; }

TextData loadText(const std::string& path, int seqLen) {
  TextData d;
  d.path = path;
  // A directory opens as a stream and fails only at the first read, where libstdc++ throws
  // its own ios_base::failure ("basic_filebuf::underflow ..."), naming neither flag nor file.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    ZRT_THROW(InvalidArgument, "--data ", path, ": is a directory; give a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    ZRT_THROW(InvalidArgument, "--data ", path, ": cannot open (", std::strerror(errno), ")");
  try {
    d.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception&) {
    ZRT_THROW(InvalidArgument, "--data ", path, ": read failed (", std::strerror(errno), ")");
  }
  if (in.bad()) ZRT_THROW(InvalidArgument, "--data ", path, ": read failed (", std::strerror(errno), ")");
  d.trainBytes = trainSplit(d.bytes.size());
  const auto train = static_cast<std::int64_t>(d.trainBytes);
  const auto validation = static_cast<std::int64_t>(d.bytes.size() - d.trainBytes);
  if (sampleRange(train, seqLen) <= 0 || sampleRange(validation, seqLen) <= 0)
    ZRT_THROW(InvalidArgument, "--data ", path, ": ", d.bytes.size(), " bytes split into ", train,
              " training and ", validation, " validation bytes, but one sample of --seq-len ",
              seqLen, " needs more than ", seqLen + 1,
              " bytes in each; use a longer file or a shorter --seq-len");
  return d;
}

}  // namespace zrt::trainer

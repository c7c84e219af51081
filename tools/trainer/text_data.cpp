#include "text_data.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "batches.h"
#include "core/error.h"

namespace zrt::trainer {

std::size_t trainSplit(std::size_t length) { return length / 10 * 9 + length % 10 * 9 / 10; }

TextData loadText(const std::string& path, int seqLen) {
  TextData d;
  d.path = path;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    ZRT_THROW(InvalidArgument, "--data ", path, ": cannot open (", std::strerror(errno), ")");
  d.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) ZRT_THROW(InvalidArgument, "--data ", path, ": read failed");
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

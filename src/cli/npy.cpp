#include "npy.hpp"

#include <fstream>
#include <string>

#include "tide/core/error.hpp"

namespace tide::cli {

void write_npy(const std::string& path, const std::string& descr,
               const std::vector<std::int64_t>& shape, std::span<const std::byte> data) {
  std::string dims;
  for (std::int64_t d : shape)
    dims += std::to_string(d) + ",";
  if (shape.size() > 1) dims.pop_back();  // (n,) keeps its comma; (a, b) does not
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple
  // of 64 bytes and ended by a newline.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw InvalidArgument("cannot write " + path);
  const auto length = static_cast<std::uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  const char length_bytes[2] = {static_cast<char>(length & 0xFF), static_cast<char>(length >> 8)};
  out.write(length_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out) throw InvalidArgument("cannot write " + path);
}

}  // namespace tide::cli

#include "tide/core/text_file.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "tide/core/error.hpp"

namespace tide {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw InvalidArgument(what + ": cannot read '" + path + "' (no such file)");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw InvalidArgument(what + ": '" + path + "' is not a regular file; pass a JSON file");
  }
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec || bytes > kMaxTextFileBytes) {
    throw InvalidArgument(what + ": '" + path + "' is larger than 16 MiB; pass a JSON file");
  }
  std::ifstream in(path);
  if (!in) throw InvalidArgument(what + ": cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace tide

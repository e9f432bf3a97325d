// FileStore and the store-based exchange.
#include "tide/core/store.hpp"

#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>

#include "tide/core/error.hpp"

namespace tide {

FileStore::FileStore(std::filesystem::path directory) : directory_(std::move(directory)) {
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  if (ec || !std::filesystem::is_directory(directory_)) {
    throw InvalidArgument("store directory '" + directory_.string() +
                          "' cannot be created: " + ec.message());
  }
}

// Keys may hold '/', which must not make sub-directories: hex-encode them.
std::filesystem::path FileStore::path_of(const std::string& key) const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name;
  for (unsigned char c : key) {
    name += kHex[c >> 4];
    name += kHex[c & 15];
  }
  return directory_ / name;
}

void FileStore::set(const std::string& key, const std::string& value) {
  const std::filesystem::path final_path = path_of(key);
  std::filesystem::path tmp = final_path;
  tmp += ".tmp" + std::to_string(std::random_device{}());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out) throw CommunicationError("store: cannot write '" + tmp.string() + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, final_path, ec);
  if (ec) throw CommunicationError("store: cannot publish key '" + key + "': " + ec.message());
}

std::string FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const std::filesystem::path p = path_of(key);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    std::ifstream in(p, std::ios::binary);
    if (in) return std::string(std::istreambuf_iterator<char>(in), {});
    if (std::chrono::steady_clock::now() > deadline) {
      throw CommunicationError("store: key '" + key + "' not set within " +
                               std::to_string(timeout.count()) +
                               " ms (a peer has not arrived, or died)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

std::vector<std::string> all_gather_values(Store& store, const std::string& key, int rank,
                                           int world, const std::string& value,
                                           std::chrono::milliseconds timeout) {
  store.set(key + "/" + std::to_string(rank), value);
  std::vector<std::string> values;
  for (int r = 0; r < world; ++r)
    values.push_back(r == rank ? value : store.get(key + "/" + std::to_string(r), timeout));
  return values;
}

}  // namespace tide

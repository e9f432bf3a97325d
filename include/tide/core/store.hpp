// The bootstrap key-value store that fabrics and communicators agree through (rendezvous of
// shared-memory names, NCCL unique ids, the capability agreement). It sits in core, below the
// fabrics and the runtime that both use it. Python hands over torch's Store; C++ tools and
// tests use FileStore.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tide {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` is set; throws CommunicationError naming the key after `timeout`.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

// A store in a directory every process can reach (one file per key, written atomically by rename).
// Fine for the processes of one host and for shared file systems with close-to-open consistency.
class FileStore final : public Store {
 public:
  explicit FileStore(std::filesystem::path directory);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  std::filesystem::path path_of(const std::string& key) const;
  std::filesystem::path directory_;
};

// Every rank of `world` sets `<key>/<rank>` and reads everyone's: the values in rank order.
std::vector<std::string> all_gather_values(Store& store, const std::string& key, int rank,
                                           int world, const std::string& value,
                                           std::chrono::milliseconds timeout);

}  // namespace tide

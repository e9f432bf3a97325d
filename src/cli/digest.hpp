// SHA-256 of byte strings (OpenSSL's libcrypto), for the simulator's output fingerprint.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace tide::cli {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  void update(std::span<const std::byte> bytes);
  // The lowercase hex digest, or nullopt where TIDE was built without OpenSSL.
  std::optional<std::string> hex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::cli

#include "digest.hpp"

#include <cstdio>

#ifdef TIDE_HAVE_OPENSSL
#include <openssl/evp.h>
#endif

namespace tide::cli {

#ifdef TIDE_HAVE_OPENSSL
struct Sha256::State {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~State() { EVP_MD_CTX_free(ctx); }
};
Sha256::Sha256() : state_(std::make_unique<State>()) {
  EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr);
}
void Sha256::update(std::span<const std::byte> bytes) {
  EVP_DigestUpdate(state_->ctx, bytes.data(), bytes.size());
}
std::optional<std::string> Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(state_->ctx, digest, &length);
  std::string text;
  char byte[3];
  for (unsigned int i = 0; i < length; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    text += byte;
  }
  return text;
}
#else
struct Sha256::State {};
Sha256::Sha256() = default;
void Sha256::update(std::span<const std::byte>) {}
std::optional<std::string> Sha256::hex() {
  return std::nullopt;
}
#endif

Sha256::~Sha256() = default;

}  // namespace tide::cli

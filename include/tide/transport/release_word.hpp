// A rendezvous transport's release word (NOTE [ipc rendezvous transport], Bounds and release):
// 4 bytes of mapped, portable host memory (every device of the process reads it), 0 until
// set() stores 1. set() is a plain host store: it reaches the device through no stream, so no
// queue that a held wait blocks can delay it. The kernels poll device().
#pragma once

namespace tide::transport {

class ReleaseWord {
 public:
  ReleaseWord();
  ~ReleaseWord();
  ReleaseWord(const ReleaseWord&) = delete;
  ReleaseWord& operator=(const ReleaseWord&) = delete;
  void set() noexcept;
  bool is_set() const noexcept;
  const unsigned int* device() const { return device_; }  // what the kernels poll

 private:
  unsigned int* host_ = nullptr;
  unsigned int* device_ = nullptr;
};

}  // namespace tide::transport

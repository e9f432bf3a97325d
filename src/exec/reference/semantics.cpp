// The reference executor's memory as a ByteSpace for the shared data effects.
#include "semantics.hpp"

namespace tide::exec::detail {
namespace {

class SimulatedBytes final : public ByteSpace {
 public:
  SimulatedBytes(const BufferTable& table, Memory& memory) : table_(table), memory_(memory) {}
  std::byte* at(const program::Buffer& buffer, std::int64_t offset) override {
    return memory_.at(table_.index(buffer), offset);
  }

 private:
  const BufferTable& table_;
  Memory& memory_;
};

}  // namespace

void apply_data(const program::Op& op, const BufferTable& table, Memory& memory) {
  SimulatedBytes space(table, memory);
  exec::apply_data(op, space);
}

}  // namespace tide::exec::detail

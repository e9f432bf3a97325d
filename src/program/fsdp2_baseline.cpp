// Stock FSDP2 as programs (Sec. 2.1): the layout copies and packing TIDE removes, around
// NCCL ring collectives that run on SMs.
//
// NCCL's rings: L channels, each a ring over all N ranks that visits the nodes in order and,
// inside node n, its local ranks starting from the channel's own (c, c + 1, ..., mod L), so
// each channel crosses between nodes through a different GPU (and rail NIC). Channel c
// carries part c of every chunk (S / L bytes). Hops inside a node are NVLink copies driven
// by NCCL's CTAs, hops between nodes rail puts; a channel's step takes as long as its slowest
// hop, so the ring moves (N - 1) S / L bytes per NIC, as NCCL does.
//
// All-gather, rank r (streams: copy_in, nccl<c>, compute):
//   1. copy-in: P copies from the sharded parameters into r's slot [r S, (r+1) S) of the
//      rank-major buffer; record COPIED_IN.
//   2. ring, per channel: for k = 0..N-2, send part c of the chunk that arrived k steps ago
//      (step 0: r's own) to the next rank, then +1 RING[c] there; step k + 1 waits RING[c].
//   3. copy-out (split_with_sizes_copy): after every channel's N - 1 arrivals, one strided
//      copy per parameter from the rank-major buffer (pitch S) to the parameter-major
//      output (Eq. 2).
// Reduce-scatter, rank r:
//   1. _chunk_cat: one SM pass writes pack[u] = alpha * fp32(G[rows of u]) (zero padded)
//      for every destination u (PREMUL_SUM); the pack buffer is 2 N S (Eq. 3).
//   2. ring, per channel: step k sends the running partial of part c of the chunk k + 1
//      positions behind r on the ring into the next rank's receive slot k mod 2 (after that
//      rank freed it: FREE[c]) and signals RECV[c]; the receiver adds its own part, partial =
//      received + own. After N - 1 steps rank r holds its own chunk: out = (accumulate ?
//      out + partial : partial).
// Synchronisation: a slot is rewritten only after its consumer signalled; every read of a
// received part waits for the signal of the transfer that wrote it.
#include "tide/program/fsdp2_baseline.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"
#include "tide/program/emitter.hpp"

namespace tide::program {
namespace {

struct RingEmitter : Emitter {
  // One ring hop of `src` into `dst` on the next rank, then +1 on `counter` there: an NVLink
  // copy inside a node, a rail put between nodes; NCCL's CTAs drive both.
  void hop(const Topology& t, int rank, int stream, const Region& src, const Region& dst,
           int counter, int ctas, const std::string& label) {
    const int next = dst.buffer.rank;
    if (t.node_of(next) == t.node_of(rank)) {
      auto& copy = add<CopyOp>(rank, stream, label);
      copy.ctas = ctas;
      copy.copies = {CopyDescriptor{src, dst}};
      signal(rank, stream, next, counter, label + " arrived");
    } else {
      auto& put = add<RailPutOp>(rank, stream, label);
      put.ctas = ctas;
      put.copies = {CopyDescriptor{src, dst}};
      put.counter = Counter{next, counter};
      put.value = 1;
    }
  }
};

// Channel c's ring: position -> rank, and rank -> position.
struct Ring {
  std::vector<int> rank_at;
  std::vector<int> position_of;
  Ring(const Topology& t, int channel) : position_of(static_cast<std::size_t>(t.world())) {
    for (int node = 0; node < t.nodes(); ++node) {
      for (int i = 0; i < t.gpus_per_node(); ++i) {
        const int rank = t.rank(node, (channel + i) % t.gpus_per_node());
        position_of[static_cast<std::size_t>(rank)] = static_cast<int>(rank_at.size());
        rank_at.push_back(rank);
      }
    }
  }
  int at(int position) const {
    return rank_at[static_cast<std::size_t>(mod(position, static_cast<int>(rank_at.size())))];
  }
  int position(int rank) const { return position_of[static_cast<std::size_t>(rank)]; }
};

// Part c of an S-byte chunk split into `channels` parts: [begin, end).
std::pair<std::int64_t, std::int64_t> part(std::int64_t bytes, int channels, int c,
                                           std::int64_t item) {
  const std::int64_t items = bytes / item;
  const std::int64_t each = (items + channels - 1) / channels;
  const std::int64_t begin = std::min(items, c * each);
  const std::int64_t end = std::min(items, (c + 1) * each);
  return {begin * item, end * item};
}

// NCCL runs a whole collective as one kernel launch: the host enqueues each channel stream's
// first op; the ring steps after it cost no host time.
void mark_kernel_steps(Program& p, const std::vector<int>& kernel_streams) {
  std::vector<char> launched(static_cast<std::size_t>(p.ranks) * p.stream_names.size(), 0);
  for (Op& op : p.ops) {
    if (std::find(kernel_streams.begin(), kernel_streams.end(), op.stream) ==
        kernel_streams.end()) {
      continue;
    }
    char& first = launched[static_cast<std::size_t>(op.rank) * p.stream_names.size() +
                           static_cast<std::size_t>(op.stream)];
    op.inside_kernel = first != 0;
    first = 1;
  }
}

Region bytes_of(Buffer buffer, std::int64_t offset, std::int64_t width) {
  return Region{buffer, offset, width, width, 1};
}

void check_options(const Fsdp2Options& options) {
  if (options.nccl_ctas < 1 || options.copy_ctas < 1) {
    throw InvalidArgument("FSDP2 baseline CTA counts must be at least 1");
  }
}

}  // namespace

Program build_fsdp2_all_gather(const GroupLayout& layout, const Fsdp2Options& options,
                               Fsdp2Ids* ids) {
  check_options(options);
  constexpr int kCopiedIn = 0, kDone = 1;
  const Topology& t = layout.topology();
  const int n = t.world();
  const int channels = t.gpus_per_node();
  const std::int64_t s = layout.shard_bytes();
  const int channel_ctas = std::max(1, options.nccl_ctas / channels);
  RingEmitter e;
  Program& p = e.program;
  p.ranks = n;
  const int copy_in = p.stream("copy_in");
  std::vector<int> nccl;
  for (int c = 0; c < channels; ++c)
    nccl.push_back(p.stream("nccl" + std::to_string(c)));
  const int compute = p.stream("compute");
  p.counters = channels;  // RING[c]
  p.events = 2;
  BufferSizes sizes;
  sizes.arena_bytes = n * s;  // the rank-major all-gather output
  for (const ParamLayout& pl : layout.params())
    sizes.tensor_bytes.push_back(pl.shard_bytes);
  sizes.output_bytes = {layout.unsharded_bytes()};
  p.buffers.assign(static_cast<std::size_t>(n), sizes);
  std::vector<Ring> rings;
  for (int c = 0; c < channels; ++c)
    rings.emplace_back(t, c);

  for (int r = 0; r < n; ++r) {
    const std::string who = "FSDP2 AG r" + std::to_string(r) + " ";
    const Buffer flat{r, Space::kArena, 0};
    auto& in = e.add<CopyOp>(r, copy_in, who + "copy-in");
    in.ctas = options.copy_ctas;
    for (int q = 0; q < layout.param_count(); ++q) {
      const ParamLayout& pl = layout.param(q);
      in.copies.push_back(CopyDescriptor{bytes_of(Buffer{r, Space::kTensor, q}, 0, pl.shard_bytes),
                                         bytes_of(flat, r * s + pl.offset, pl.shard_bytes)});
    }
    e.record_event(r, copy_in, kCopiedIn, who + "copied in");
    for (int c = 0; c < channels; ++c) {
      const Ring& ring = rings[static_cast<std::size_t>(c)];
      const auto [begin, end] = part(s, channels, c, item_bytes(layout.ag_dtype()));
      if (end == begin) continue;  // a shard too small to give this channel a part
      // The NCCL kernel starts here.
      e.wait_event(r, nccl[static_cast<std::size_t>(c)], kCopiedIn, who + "ring after copy-in")
          .ctas = channel_ctas;
      const int next = ring.at(ring.position(r) + 1);
      for (int k = 0; k < n - 1; ++k) {
        e.wait(
            r, nccl[static_cast<std::size_t>(c)], c, k,
            who + "channel " + std::to_string(c) + " step " + std::to_string(k - 1) + " arrived");
        const int chunk = ring.at(ring.position(r) - k);
        e.hop(t, r, nccl[static_cast<std::size_t>(c)],
              bytes_of(flat, chunk * s + begin, end - begin),
              bytes_of(Buffer{next, Space::kArena, 0}, chunk * s + begin, end - begin), c,
              channel_ctas,
              who + "ch" + std::to_string(c) + " step " + std::to_string(k) + " chunk " +
                  std::to_string(chunk));
      }
    }
    for (int c = 0; c < channels; ++c) {
      const auto [begin, end] = part(s, channels, c, item_bytes(layout.ag_dtype()));
      if (end > begin) e.wait(r, compute, c, n - 1, who + "channel " + std::to_string(c) + " done");
    }
    e.wait_event(r, compute, kCopiedIn, who + "own chunk copied in");
    auto& out = e.add<CopyOp>(r, compute, who + "split_with_sizes_copy");
    out.ctas = options.copy_ctas;
    for (int q = 0; q < layout.param_count(); ++q) {
      const ParamLayout& pl = layout.param(q);
      out.copies.push_back(
          CopyDescriptor{Region{flat, pl.offset, pl.shard_bytes, s, n},
                         Region{Buffer{r, Space::kOutput, 0}, layout.landing_offset(q, 0),
                                pl.shard_bytes, pl.shard_bytes, n}});
    }
    e.record_event(r, compute, kDone, who + "parameters ready");
  }
  mark_kernel_steps(p, nccl);
  if (ids) ids->done_event = kDone;
  return std::move(e.program);
}

Program build_fsdp2_reduce_scatter(const GroupLayout& layout, const Fsdp2Options& options,
                                   Fsdp2Ids* ids) {
  check_options(options);
  constexpr int kPacked = 0, kDone = 1, kChannelDone = 2;
  const Topology& t = layout.topology();
  const int n = t.world();
  const int channels = t.gpus_per_node();
  const std::int64_t block = layout.fp32_shard_bytes();  // one output-sized fp32 block
  const std::int64_t b_grad = item_bytes(layout.grad_dtype());
  const int channel_ctas = std::max(1, options.nccl_ctas / channels);
  RingEmitter e;
  Program& p = e.program;
  p.ranks = n;
  const int compute = p.stream("compute");
  std::vector<int> nccl;
  for (int c = 0; c < channels; ++c)
    nccl.push_back(p.stream("nccl" + std::to_string(c)));
  auto recv_counter = [](int c) { return 2 * c; };
  auto free_counter = [](int c) { return 2 * c + 1; };
  p.counters = 2 * channels;
  p.events = kChannelDone + channels;
  // Arena: the pack buffer (N blocks), two receive slots and one partial slot of a block
  // (each channel uses its part of them).
  const std::int64_t recv_base = n * block;
  const std::int64_t send_base = recv_base + 2 * block;
  BufferSizes sizes;
  sizes.arena_bytes = send_base + block;
  for (const ParamLayout& pl : layout.params()) {
    sizes.tensor_bytes.push_back(pl.rows * pl.cols * b_grad);
  }
  sizes.output_bytes = {block};
  p.buffers.assign(static_cast<std::size_t>(n), sizes);
  std::vector<Ring> rings;
  for (int c = 0; c < channels; ++c)
    rings.emplace_back(t, c);

  for (int r = 0; r < n; ++r) {
    const std::string who = "FSDP2 RS r" + std::to_string(r) + " ";
    const Buffer arena{r, Space::kArena, 0};
    const Buffer out{r, Space::kOutput, 0};
    auto& pack = e.add<SumOp>(r, compute, who + "_chunk_cat");
    pack.ctas = options.copy_ctas;
    pack.alpha = options.alpha;
    pack.in_dtype = layout.grad_dtype();
    pack.dst = Region{arena, 0, block, block, n};
    for (int u = 0; u < n; ++u) {
      for (int q = 0; q < layout.param_count(); ++q) {
        const ParamLayout& pl = layout.param(q);
        const std::int64_t valid = layout.valid_rows(q, u) * pl.cols;
        if (valid == 0) continue;
        pack.segments.push_back(SumSegment{u, pl.out_offset, q, u * pl.shard_elems(), valid});
      }
    }
    e.record_event(r, compute, kPacked, who + "packed");
    for (int c = 0; c < channels; ++c) {
      const Ring& ring = rings[static_cast<std::size_t>(c)];
      const int stream = nccl[static_cast<std::size_t>(c)];
      const auto [begin, end] = part(block, channels, c, 4);
      const std::int64_t bytes = end - begin;
      if (bytes == 0) continue;
      e.wait_event(r, stream, kPacked, who + "ring after packing").ctas =
          channel_ctas;  // the NCCL kernel starts here
      const int next = ring.at(ring.position(r) + 1);
      const int previous = ring.at(ring.position(r) - 1);
      const std::string ch = "ch" + std::to_string(c) + " ";
      for (int k = 0; k < n - 1; ++k) {
        const int chunk_sent = ring.at(ring.position(r) - k - 1);
        const Region src = k == 0 ? bytes_of(arena, chunk_sent * block + begin, bytes)
                                  : bytes_of(arena, send_base + begin, bytes);
        e.wait(r, stream, free_counter(c), k - 1,
               who + ch + "receive slot on r" + std::to_string(next) + " free");
        e.hop(t, r, stream, src,
              bytes_of(Buffer{next, Space::kArena, 0}, recv_base + (k % 2) * block + begin, bytes),
              recv_counter(c), channel_ctas, who + ch + "step " + std::to_string(k));
        e.wait(r, stream, recv_counter(c), k + 1,
               who + ch + "step " + std::to_string(k) + " arrived");
        const int chunk = ring.at(ring.position(previous) - k - 1);
        const bool last = k == n - 2;
        auto& add = e.add<LandOp>(r, stream, who + ch + "reduce chunk " + std::to_string(chunk));
        add.ctas = channel_ctas;
        add.sources = {bytes_of(arena, recv_base + (k % 2) * block + begin, bytes),
                       bytes_of(arena, chunk * block + begin, bytes)};
        add.dst = last ? bytes_of(out, begin, bytes) : bytes_of(arena, send_base + begin, bytes);
        add.accumulate = last && options.accumulate;
        e.signal(r, stream, previous, free_counter(c), who + ch + "receive slot free");
      }
      if (n == 1) {  // no ring: the packed block is the sum
        auto& copy = e.add<LandOp>(r, stream, who + ch + "single rank");
        copy.ctas = channel_ctas;
        copy.sources = {bytes_of(arena, begin, bytes)};
        copy.dst = bytes_of(out, begin, bytes);
        copy.accumulate = options.accumulate;
      }
    }
    for (int c = 0; c < channels; ++c) {
      e.record_event(r, nccl[static_cast<std::size_t>(c)], kChannelDone + c,
                     who + "channel " + std::to_string(c) + " done");
      e.wait_event(r, compute, kChannelDone + c, who + "wait channel " + std::to_string(c));
    }
    e.record_event(r, compute, kDone, who + "reduce-scatter done");
  }
  mark_kernel_steps(p, nccl);
  if (ids) ids->done_event = kDone;
  return std::move(e.program);
}

}  // namespace tide::program

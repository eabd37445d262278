// Internal to the live layer: a peer exchange that carries CUDA memory over
// an exchange that moves host memory only ("ucx", "inproc") through a
// bounded pool of pinned host buffers, in a pipeline of windows.
//
// The decorator declares memory kinds {host, CUDA} and never pulls
// (pull_on_one_host false), so a pushing session over it keeps its CUDA
// fragments where they are (the direct path, device_regions.h) instead of
// mirroring them whole in pinned host memory (device_mirrors.h): the
// pinned memory it holds is at most `budget` bytes whatever the model's
// size. Address, Connect, Disconnect, WireUp, ImportRemoteKey,
// PeerFailure, Progress, Abandon and RegisterMemory are the inner
// exchange's.
//
// Run(ops):
//  - A kSend or kReceive without a buffer whose regions' messages are
//    staged (`staged(region)` of any of its regions: the caller's rule, the
//    same on every rank, for instance "a side of the region is CUDA memory
//    on its rank") is carried as chunk messages: its stream (the regions'
//    sides, row by row, as the inner exchange would send it) cut into
//    chunks of `chunk_bytes` (the last shorter). A send's chunk is packed
//    into a pinned slot (device to host, or host to host for a host
//    region of the message, lowered as the CUDA executor lowers a region,
//    copy_lowering.h) and sent from it as a buffer operation; a receive's
//    chunk lands in a slot and is unpacked host to device after its window
//    ran. Chunk c of a message travels under session tag `session_tag`
//    mixed with c (ChunkTag), named by the message's first region as
//    before, so chunks of one message never match each other.
//  - Every other operation (host messages, buffer operations such as
//    verification's hashes, gets of host memory) passes through as it is.
//    A get of a staged region is refused (FailedPrecondition): the
//    decorator offers no pull.
//  - Bound: at most budget / chunk_bytes slots, each chunk_bytes of pinned
//    memory, allocated as windows first need them and kept. The messages
//    (chunk messages and passed-through operations, one each) run in
//    windows, one inner Run per window, in order. Where two slots fit,
//    the slots form two halves and windows of at most half of them
//    alternate between the halves: while window k moves, window k + 1's
//    sends are packed into the other half (a pipeline of two stages);
//    with one slot, windows of one chunk run one after another.
//  - Order, and why windows cannot deadlock: every message carries the
//    key (chunk index, first region index) (a passed-through operation:
//    chunk 0); the region is the plan's, so both ends of a message compute
//    the same key, and no two messages share one. Each rank sorts its
//    messages by key and cuts the sorted list into contiguous windows (a
//    new window also starts at each new chunk index, as the tag changes).
//    Take the smallest key m not yet delivered anywhere. Every message of
//    m's sender and of its receiver with a smaller key is delivered, so
//    each of the two has finished every window before the one holding m
//    and runs that window's inner Run; in it every operation before m is
//    complete, so m is posted on both ends (the inner exchange posts a
//    Run's operations in order, at most max_in_flight unfinished) and
//    completes. By induction every message completes, whatever the
//    windows' sizes on either rank (one chunk message per window
//    included).
//  - The chunk size must be the same on every rank (both ends cut the
//    same stream): it is a constant of the session (kStagedChunkBytes),
//    not derived from a rank's budget.
//  - Callbacks keep their contracts for the caller's operations:
//    on_completion(i) once every chunk of operation i moved (a receive's
//    bytes are unpacked into its targets by then); on_piece with the
//    packed bytes of a staged send's chunk after packing and of a staged
//    receive's chunk after unpacking (the session hashes them there
//    instead of reading the device again); on_first_completion once.
//    ExchangeStats add up the inner Runs (a chunk counts as one message);
//    packed_messages counts each staged chunk message once more.
//  - A failed window leaves what its inner Run left (abandoned_in_flight);
//    slots of a window left in flight are never freed (Abandon's rule).
//    A received chunk of another size than expected is DataLoss naming the
//    operation. Deadline and poll_abort reach every inner Run.
//  - Overlap is partial: window k's unpacking and window k + 1's packing
//    are waited for together before window k + 1 moves. One chunk index
//    per window also means a message of n chunks takes n windows in
//    turn. Throughput against the mirrors is not measured.
#ifndef RESHARD_LIVE_STAGED_EXCHANGE_H_
#define RESHARD_LIVE_STAGED_EXCHANGE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "exec_cuda/device_api.h"
#include "reshard/sdk/peer_exchange.h"
#include "reshard/status.h"

namespace reshard::live_internal {

// The chunk of the staged messages of live sessions: the largest
// coalesced message (kMaxCoalescedBytes), so a message of small regions
// is one chunk.
inline constexpr uint64_t kStagedChunkBytes = kMaxCoalescedBytes;

struct StagedExchangeOptions {
  // Pinned host bytes the slots may take (LiveSessionOptions::
  // device_staging_bytes): at least chunk_bytes.
  uint64_t budget = 0;
  uint64_t chunk_bytes = kStagedChunkBytes;
  // Whether messages naming `region` (a plan region index) are staged;
  // must answer alike on every rank. Empty: none is (every operation
  // passes through).
  std::function<bool(uint32_t region)> staged;
};

// The session tag of chunk `chunk` of a staged message (chunk 0: `tag`).
uint32_t ChunkTag(uint32_t tag, uint64_t chunk);

// OK when `budget` holds a chunk, else MakeStagedExchange's refusal.
Status CheckStagedBudget(uint64_t budget,
                         uint64_t chunk_bytes = kStagedChunkBytes);

// `inner` carrying staged messages through pinned slots of `api`; with a
// null `api` (a rank without a CUDA executor, whose every region side is
// host memory) the slots are host memory and the copies host copies.
// InvalidArgument when the budget holds no chunk: "device_staging_bytes
// (B) is smaller than one staged chunk (C bytes): the pipeline through
// pinned host buffers needs at least one".
Result<std::unique_ptr<PeerExchange>> MakeStagedExchange(
    std::unique_ptr<PeerExchange> inner, std::shared_ptr<cuda::DeviceApi> api,
    StagedExchangeOptions options);

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_STAGED_EXCHANGE_H_

// The key layout of a weight-store revision and the small helpers every
// store operation shares (docs/store-format.md).

#ifndef RESHARD_STORE_LAYOUT_H_
#define RESHARD_STORE_LAYOUT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "reshard/object_store.h"
#include "reshard/stored_manifest.h"
#include "store/checksum.h"

namespace reshard::internal {

int64_t UnixSeconds();

// `bytes` random bytes as hex; the generator is reseeded in every process,
// so forked writers never share ids.
std::string RandomHex(size_t bytes);

// "<base>/payload/<txn>/<fid>" -> txn ("" if not a payload key).
std::string TransactionOfObject(std::string_view object_key);

// "<base>/manifest" -> base ("" if not a manifest key).
std::string BaseOfManifestKey(std::string_view manifest_key);

// "<base>/checksums/<txn>/<fid>".
std::string ChecksumKey(std::string_view base, std::string_view txn,
                        std::string_view fragment_id);

// The parsed checksum record of a stored fragment of the revision at
// `base`; errors name the fragment.
Result<ChunkSums> ReadChunkSums(ObjectStore& backend, std::string_view base,
                                const StoredFragment& fragment);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_LAYOUT_H_

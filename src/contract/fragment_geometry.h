// The geometry rules of one fragment against its tensor, shared by
// placement parts and stored manifests.

#ifndef RESHARD_CONTRACT_FRAGMENT_GEOMETRY_H_
#define RESHARD_CONTRACT_FRAGMENT_GEOMETRY_H_

#include "reshard/placement.h"

namespace reshard::internal {

// Rules 7-9 of docs/validation-rules.md: the fragment's box lies inside the
// tensor, has its rank, and its nbytes is the box's size in bytes.
Status CheckFragmentGeometry(const TensorDescriptor& t,
                             const PlacementFragment& f);

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_FRAGMENT_GEOMETRY_H_

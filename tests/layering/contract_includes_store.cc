// Must not compile with the include roots of the contract layer: the store
// is above it (tests/layering/, cmake/layers.cmake).
#include "store/keys.h"

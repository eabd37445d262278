// Must not compile with the include roots of the contract layer: the
// public header of the store layer is not one of its headers.
#include "reshard/weight_store.h"

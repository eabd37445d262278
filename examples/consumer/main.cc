// Prints the placement_id of the weight placement manifest in a file: reads
// the JSON text, decodes and validates it with the strict decoder and asks
// the manifest for its identity; then the store URI schemes the linked
// backends registered (they register themselves, so an installed link
// that dropped them would print none). Built against an installed reshard
// only.
//
// Usage: placement_id PLACEMENT.json

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "reshard/reshard.h"
#include "reshard/sdk/backend_registry.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " PLACEMENT.json\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "cannot read " << argv[1] << "\n";
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  reshard::Result<reshard::WeightPlacementManifest> placement =
      reshard::WeightPlacementFromJson(text.str());
  if (!placement.ok()) {
    std::cerr << placement.status().ToString() << "\n";
    return 1;
  }
  std::cout << placement->placement_id();
  for (const std::string& scheme : reshard::RegisteredStoreSchemes()) {
    std::cout << " " << scheme;
  }
  std::cout << "\n";
  return 0;
}

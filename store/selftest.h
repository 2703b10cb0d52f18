// Known-answer vectors shipped inside the library and binary (`seedstore selftest`).
#pragma once
#include <string>
#include <vector>

namespace seedstore {

struct SelfTestCase {
  std::string name;
  bool passed = false;
  std::string detail;  // expected vs got on failure
};

/// Runs every known-answer vector: Random123's Threefry-2x32-13/20/32 and Philox-4x32-10
/// lines, JAX-published key/sampler values, XXH3-128 of the fingerprint record against
/// libxxhash, and sampler values against vectors produced by real JAX.
std::vector<SelfTestCase> RunSelfTest();

}  // namespace seedstore

// What every benchmark reports of a figure measured over rounds: its
// minimum, median and maximum. Goals are judged on the median (one round on
// these shared machines can swing several times the others on first
// touches of memory).

#ifndef RESHARD_BENCH_BENCH_STATS_H_
#define RESHARD_BENCH_BENCH_STATS_H_

#include <algorithm>
#include <vector>

namespace reshard::bench {

// Rounds a benchmark runs at least.
inline constexpr int kMinRounds = 3;

struct Spread {
  double min = 0, median = 0, max = 0;
};

// The spread of `v` (not empty); an even count's median is the mean of
// the middle two.
inline Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {v.front(), n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2,
          v.back()};
}

}  // namespace reshard::bench

#endif  // RESHARD_BENCH_BENCH_STATS_H_

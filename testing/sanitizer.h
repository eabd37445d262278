// Whether this test binary runs under a sanitizer (AddressSanitizer or
// ThreadSanitizer, with gcc or clang): such runs reserve terabytes of
// shadow memory (no address-space limit can be set under them) and run
// several times slower (long repetitions are cut there).

#ifndef RESHARD_TESTING_SANITIZER_H_
#define RESHARD_TESTING_SANITIZER_H_

namespace reshard::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_SANITIZER_H_

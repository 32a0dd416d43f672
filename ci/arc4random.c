// arc4random, arc4random_buf and arc4random_uniform for a GPU machine whose glibc is older than
// 2.36, the first glibc to have them. ci/gpu prepare builds this into the carry as
// libdflash_arc4random.so for Debian 12's libevent, whose references to them it makes
// unversioned (ci/elf-weak-version): the loader binds them to glibc's where glibc has them, and
// to these only where it does not. The bytes come from the kernel (getrandom(2), glibc 2.25), as
// glibc's own do.
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

void arc4random_buf(void* buffer, size_t size) {
  unsigned char* at = buffer;
  while (size > 0) {
    const ssize_t got = getrandom(at, size, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      abort();  // as glibc's: no randomness is not an error a caller can handle
    }
    at += got;
    size -= (size_t)got;
  }
}

uint32_t arc4random(void) {
  uint32_t value;
  arc4random_buf(&value, sizeof value);
  return value;
}

// Uniform in [0, bound): draws below the largest multiple of bound are kept (no modulo bias).
uint32_t arc4random_uniform(uint32_t bound) {
  if (bound < 2) return 0;
  const uint32_t floor = (uint32_t)(-bound) % bound;  // 2^32 mod bound
  for (;;) {
    const uint32_t r = arc4random();
    if (r >= floor) return r % bound;
  }
}

// libFuzzer target for the GGUF reader: any byte string must either parse or
// throw gguf::Error — never crash, hang, leak or read out of bounds. A parsed
// file is walked completely (metadata, typed getters, tensor data) so that
// ASan sees every view the reader hands out.
#include <cstddef>
#include <cstdint>

#include "lumen/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lumen::gguf;
  try {
    const File file = File::from_memory({data, size});
    for (const KeyValue& kv : file.metadata()) {
      try {
        (void)file.get_uint(kv.key);
      } catch (const Error&) {
      }
      try {
        (void)file.get_string_array(kv.key);
      } catch (const Error&) {
      }
    }
    volatile uint8_t sink = 0;
    for (const TensorInfo& t : file.tensors()) {
      if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
    }
    (void)file.alignment();
  } catch (const Error&) {
  }
  return 0;
}

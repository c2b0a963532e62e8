/* Native CPU kernels: decode attention read in place through block tables or arena regions, and the KV write.
 *
 * The torch references (kernels/reference.py) are the ground truth; kernels/cpu_native.py compiles this file
 * once per machine, loads it with ctypes, and gives each function the reference's signature. One thread, as
 * the CPU backend runs one model thread.
 *
 * Layouts (row-major, contiguous): the query and output [num_seqs, num_heads, head_dim]; the cache seen as
 * slots [num_slots, num_kv_heads, head_dim] (a paged cache's block b, offset i is slot b * block_size + i).
 * Scores and softmax in fp32, the output rounded once to the cache's dtype (as the reference does).
 *
 * Each sequence's K is read once, slot by slot in block order, scoring every query head against it; then
 * its V once, accumulating the weighted rows: no gather of the blocks into a buffer first.
 *
 * Return codes: 0 ok; 1 a block index outside the cache; 2 a slot outside the cache; 3 out of memory.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef float f32;
typedef _Float16 f16;
typedef uint16_t bf16;

static inline float f32_load(const float *p) { return *p; }
static inline float f16_load(const f16 *p) { return (float)*p; }
static inline float bf16_load(const bf16 *p) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)*p << 16;
    return c.f;
}
static inline float f32_from(float x) { return x; }
static inline f16 f16_from(float x) { return (f16)x; }
static inline bf16 bf16_from(float x) {        /* round to nearest even, NaN kept a NaN (torch's rounding) */
    union { uint32_t u; float f; } c;
    c.f = x;
    if ((c.u & 0x7fffffffu) > 0x7f800000u) return (bf16)((c.u >> 16) | 0x40);
    return (bf16)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}

/* The slot holding position p of a sequence: through its block table (paged), or from its region's start. */
static inline int64_t slot_of(const int32_t *table, int64_t block_size, int64_t start, int64_t p) {
    return table ? (int64_t)table[p / block_size] * block_size + p % block_size : start + p;
}

/* One sequence: q [H, D] (fp32), its context of `len` slots given by `slot_of`, into acc [H, D]. */
#define DEFINE_DECODE(T, LOAD, FROM)                                                                          \
int decode_attention_##T(const T *query, const T *k_cache, const T *v_cache, T *out,                        \
                         const int32_t *tables, int64_t table_stride, int64_t block_size, int64_t num_blocks, \
                         const int64_t *starts, int64_t num_slots,                                           \
                         const int32_t *lens, int64_t num_seqs, int64_t num_heads, int64_t num_kv_heads,     \
                         int64_t head_dim, float scale) {                                                    \
    const int64_t group = num_heads / num_kv_heads, row = num_kv_heads * head_dim;                           \
    int64_t most = 1;                                                                                        \
    for (int64_t s = 0; s < num_seqs; s++) if (lens[s] > most) most = lens[s];                              \
    float *scores = malloc(sizeof(float) * (size_t)(num_heads * most + 2 * num_heads * head_dim));           \
    if (!scores) return 3;                                                                                   \
    float *q = scores + num_heads * most, *acc = q + num_heads * head_dim;                                   \
    int code = 0;                                                                                            \
    for (int64_t s = 0; s < num_seqs && !code; s++) {                                                        \
        const int64_t len = lens[s];                                                                         \
        const int32_t *table = tables ? tables + s * table_stride : NULL;                                    \
        const int64_t start = table ? 0 : starts[s];                                                         \
        if (!table && (start < 0 || start + len > num_slots)) { code = 2; break; }                           \
        if (table) {                                                                                         \
            for (int64_t b = 0; b < (len + block_size - 1) / block_size; b++)                                \
                if (table[b] < 0 || table[b] >= num_blocks) code = 1;                                        \
            if (code) break;                                                                                 \
        }                                                                                                    \
        for (int64_t i = 0; i < num_heads * head_dim; i++) {                                                 \
            q[i] = LOAD(query + s * num_heads * head_dim + i) * scale;                                       \
            acc[i] = 0.0f;                                                                                   \
        }                                                                                                    \
        /* K: every query head's score at every position, slot by slot. */                                   \
        for (int64_t p = 0; p < len; p++) {                                                                  \
            const T *k = k_cache + slot_of(table, block_size, start, p) * row;                               \
            for (int64_t h = 0; h < num_heads; h++) {                                                        \
                const T *kh = k + (h / group) * head_dim;                                                    \
                const float *qh = q + h * head_dim;                                                          \
                float dot = 0.0f;                                                                            \
                for (int64_t d = 0; d < head_dim; d++) dot += qh[d] * LOAD(kh + d);                          \
                scores[h * most + p] = dot;                                                                  \
            }                                                                                                \
        }                                                                                                    \
        /* Softmax per head, in place. */                                                                     \
        for (int64_t h = 0; h < num_heads; h++) {                                                            \
            float *sh = scores + h * most, top = -INFINITY, sum = 0.0f;                                      \
            for (int64_t p = 0; p < len; p++) top = sh[p] > top ? sh[p] : top;                               \
            for (int64_t p = 0; p < len; p++) { sh[p] = expf(sh[p] - top); sum += sh[p]; }                  \
            const float inv = 1.0f / sum;                                                                    \
            for (int64_t p = 0; p < len; p++) sh[p] *= inv;                                                  \
        }                                                                                                    \
        /* V: the weighted rows, slot by slot. */                                                            \
        for (int64_t p = 0; p < len; p++) {                                                                  \
            const T *v = v_cache + slot_of(table, block_size, start, p) * row;                               \
            for (int64_t h = 0; h < num_heads; h++) {                                                        \
                const T *vh = v + (h / group) * head_dim;                                                    \
                float *ah = acc + h * head_dim;                                                              \
                const float w = scores[h * most + p];                                                        \
                for (int64_t d = 0; d < head_dim; d++) ah[d] += w * LOAD(vh + d);                            \
            }                                                                                                \
        }                                                                                                    \
        T *o = out + s * num_heads * head_dim;                                                               \
        for (int64_t i = 0; i < num_heads * head_dim; i++) o[i] = FROM(acc[i]);                              \
    }                                                                                                        \
    free(scores);                                                                                            \
    return code;                                                                                             \
}

/* Each token's K and V row at its slot; a negative slot is skipped. */
#define DEFINE_WRITE(T)                                                                                      \
int write_kv_##T(const T *key, const T *value, T *k_cache, T *v_cache, const int64_t *slots,               \
                 int64_t num_tokens, int64_t row, int64_t num_slots) {                                       \
    for (int64_t t = 0; t < num_tokens; t++) {                                                               \
        const int64_t slot = slots[t];                                                                       \
        if (slot < 0) continue;                                                                              \
        if (slot >= num_slots) return 2;                                                                     \
        memcpy(k_cache + slot * row, key + t * row, sizeof(T) * (size_t)row);                                \
        memcpy(v_cache + slot * row, value + t * row, sizeof(T) * (size_t)row);                              \
    }                                                                                                        \
    return 0;                                                                                                \
}

DEFINE_DECODE(f32, f32_load, f32_from)
DEFINE_DECODE(f16, f16_load, f16_from)
DEFINE_DECODE(bf16, bf16_load, bf16_from)
DEFINE_WRITE(f32)
DEFINE_WRITE(f16)
DEFINE_WRITE(bf16)

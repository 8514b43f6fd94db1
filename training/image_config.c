/* training/image_config.c - the image kind's configuration: defaults, checks (alignment included),
 * the architectures' names, and the flow spec each architecture generates (training/model_image.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "training/model_image.h"

static const char *const ARCH_NAMES[] = {"glow", "realnvp", "tarflow", "spec"};

int nf_image_arch_parse(const char *name, nf_image_arch *arch)
{
    for (int k = 0; k < 3; k++)
        if (name && !strcmp(name, ARCH_NAMES[k])) {
            *arch = (nf_image_arch)k;
            return NF_OK;
        }
    return nf_error(NF_EINVAL, "arch '%s': expected %s", name ? name : "", NF_IMAGE_ARCH_NAMES);
}

const char *nf_image_arch_name(nf_image_arch arch)
{
    return arch >= NF_IMAGE_GLOW && arch <= NF_IMAGE_SPEC ? ARCH_NAMES[arch] : "?";
}

static const char *const DEQUANT_NAMES[] = {"uniform", "variational"};

int nf_image_dequant_parse(const char *name, nf_image_dequant_kind *kind)
{
    for (int k = 0; k < 2; k++)
        if (name && !strcmp(name, DEQUANT_NAMES[k])) {
            *kind = (nf_image_dequant_kind)k;
            return NF_OK;
        }
    return nf_error(NF_EINVAL, "dequantisation '%s': expected %s", name ? name : "", NF_DEQUANT_NAMES);
}

const char *nf_image_dequant_name(nf_image_dequant_kind kind)
{
    return kind == NF_DEQUANT_UNIFORM || kind == NF_DEQUANT_VARIATIONAL ? DEQUANT_NAMES[kind] : "?";
}

void nf_image_config_init(nf_image_config *c)
{
    memset(c, 0, sizeof *c);
    c->h = c->w = 8;
    c->c = 1;
    c->levels = 256;
    c->arch = NF_IMAGE_GLOW;
    c->scales = 2;
    c->steps = 4;
    c->hidden = 64;
    c->patch = 2;
    c->width = 64;
    c->heads = 4;
    c->layers = 2;
    c->blocks = 4;
    c->seed = 1;
    c->align_weight = 0.5;
    c->align_layers = 1;
    c->dequant = NF_DEQUANT_UNIFORM;
    c->dequant_layers = 4;
    c->dequant_hidden = 16;
}

int nf_image_align_layers_parse(const char *list, uint64_t *mask)
{
    uint64_t m = 0;
    const char *p = list ? list : "";
    while (*p) {
        char *end;
        long j = strtol(p, &end, 10);
        if (end == p || j < 0 || j >= 64 || (*end && *end != ','))
            return nf_error(NF_EINVAL, "alignment layers '%s': expected generative block indices 0..63 separated by commas (\"0\" or \"0,1\")",
                            list ? list : "");
        m |= (uint64_t)1 << j;
        p = *end ? end + 1 : end;
    }
    if (!m) return nf_error(NF_EINVAL, "alignment layers '%s': expected at least one block index (\"0\")", list ? list : "");
    *mask = m;
    return NF_OK;
}

void nf_image_align_layers_format(uint64_t mask, char *buf, size_t size)
{
    size_t at = 0;
    if (size) buf[0] = '\0';
    for (int j = 0; j < 64 && size; j++)
        if (mask >> j & 1) {
            int k = snprintf(buf + at, size - at, "%s%d", at ? "," : "", j);
            if (k < 0 || (size_t)k >= size - at) break;
            at += (size_t)k;
        }
}

/* The alignment settings, when on. */
static int align_check(const nf_image_config *c)
{
    if (!c->align) return NF_OK;
    if (c->arch != NF_IMAGE_TARFLOW && c->arch != NF_IMAGE_SPEC)
        return nf_error(NF_EINVAL, "alignment reads the hidden states of tarflow blocks; the %s architecture has none (use tarflow)",
                        nf_image_arch_name(c->arch));
    if (c->align_classes < 2)
        return nf_error(NF_EINVAL, "alignment needs image classes to train its encoder (%d classes; expected a one-hot /context of at least 2)",
                        c->align_classes);
    if (c->classes && c->classes != c->align_classes)
        return nf_error(NF_EINVAL, "alignment: the encoder has %d classes, the conditional flow %d; expected the same", c->align_classes,
                        c->classes);
    if (!(c->align_weight >= 0 && c->align_weight <= 100))
        return nf_error(NF_EINVAL, "alignment weight %g: expected 0..100", c->align_weight);
    if (!c->align_layers) return nf_error(NF_EINVAL, "alignment layers: expected at least one generative block");
    if (c->arch == NF_IMAGE_TARFLOW && c->blocks < 64 && c->align_layers >> c->blocks)
        return nf_error(NF_EINVAL, "alignment layers: the flow has %d blocks (generative blocks 0..%d)", c->blocks, c->blocks - 1);
    return NF_OK;
}

/* The dequantiser's settings. */
static int dequant_check(const nf_image_config *c)
{
    if (c->dequant == NF_DEQUANT_UNIFORM) return NF_OK;
    if (c->dequant != NF_DEQUANT_VARIATIONAL)
        return nf_error(NF_EINVAL, "dequantisation %d: expected %s", (int)c->dequant, NF_DEQUANT_NAMES);
    if (c->dequant_layers < 1 || c->dequant_layers > 16)
        return nf_error(NF_EINVAL, "dequantiser layers %d: expected 1..16 couplings", c->dequant_layers);
    if (c->dequant_hidden < 1 || c->dequant_hidden > 1024)
        return nf_error(NF_EINVAL, "dequantiser hidden %d: expected 1..1024 conditioner channels", c->dequant_hidden);
    if (c->align)
        return nf_error(NF_EINVAL, "variational dequantisation with alignment is not supported (use --dequant uniform with --align)");
    return NF_OK;
}

int nf_image_config_check(const nf_image_config *c)
{
    if (c->h < 1 || c->w < 1 || c->c < 1 || (double)c->h * c->w * c->c > (1 << 20))
        return nf_error(NF_EINVAL, "image shape %dx%dx%d: expected sides >= 1 and at most 2^20 values", c->h, c->w, c->c);
    if (c->levels < 2 || c->levels > 65536)
        return nf_error(NF_EINVAL, "image levels %d: expected 2..65536 grey levels", c->levels);
    if (c->classes < 0 || c->classes > 100000) return nf_error(NF_EINVAL, "classes %d: expected 0..100000", c->classes);
    if (!(c->noise >= 0 && c->noise <= 1)) return nf_error(NF_EINVAL, "noise %g: expected 0..1", c->noise);
    if (c->micro_batch < 0 || c->micro_batch > 65536)
        return nf_error(NF_EINVAL, "micro-batch %d: expected 0 (automatic) or 1..65536 images", c->micro_batch);
    if (!(c->label_drop >= 0 && c->label_drop < 1))
        return nf_error(NF_EINVAL, "label drop %g: expected a probability in [0, 1)", c->label_drop);
    NF_TRY(align_check(c));
    NF_TRY(dequant_check(c));
    switch (c->arch) {
    case NF_IMAGE_GLOW:
    case NF_IMAGE_REALNVP: {
        if (c->scales < 1 || c->scales > 8) return nf_error(NF_EINVAL, "scales %d: expected 1..8", c->scales);
        int f = 1 << c->scales;
        if (c->h % f || c->w % f)
            return nf_error(NF_EINVAL, "%d scales need image sides divisible by %d (the image is %dx%d); use fewer scales",
                            c->scales, f, c->h, c->w);
        if (c->steps < 1 || c->steps > 64) return nf_error(NF_EINVAL, "steps %d: expected 1..64 per scale", c->steps);
        if (c->hidden < 1 || c->hidden > 4096) return nf_error(NF_EINVAL, "hidden %d: expected 1..4096", c->hidden);
        return NF_OK;
    }
    case NF_IMAGE_TARFLOW:
        if (c->patch < 1 || c->h % c->patch || c->w % c->patch)
            return nf_error(NF_EINVAL, "patch %d: expected a divisor of both image sides (%dx%d)", c->patch, c->h, c->w);
        if (c->width < 1 || c->heads < 1 || c->width % c->heads)
            return nf_error(NF_EINVAL, "transformer width %d and %d heads: the width must be a multiple of the heads",
                            c->width, c->heads);
        if (c->layers < 1 || c->blocks < 1 || c->layers > 64 || c->blocks > 64)
            return nf_error(NF_EINVAL, "%d layers and %d blocks: expected 1..64 each", c->layers, c->blocks);
        return NF_OK;
    case NF_IMAGE_SPEC:
        return c->spec[0] ? NF_OK : nf_error(NF_EINVAL, "no flow spec given");
    }
    return nf_error(NF_EINVAL, "unknown image architecture %d", (int)c->arch);
}

/* Append printf-style text to spec[0..size), failing when it does not fit. */
static int put(char *spec, size_t size, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int put(char *spec, size_t size, size_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(spec + *at, size - *at, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= size - *at) return nf_error(NF_EINVAL, "image flow spec longer than %zu characters", size);
    *at += (size_t)k;
    return NF_OK;
}

#define SEP (at ? ", " : "")

int nf_image_spec(const nf_image_config *c, char *spec, size_t size)
{
    NF_TRY(nf_image_config_check(c));
    size_t at = 0;
    spec[0] = '\0';
    int h = c->h, w = c->w, ch = c->c;
    switch (c->arch) {
    case NF_IMAGE_SPEC:
        return put(spec, size, &at, "%s", c->spec);
    case NF_IMAGE_GLOW:
        for (int s = 0; s < c->scales; s++) {
            NF_TRY(put(spec, size, &at, "%ssqueeze(h=%d,w=%d,c=%d)", SEP, h, w, ch));
            h /= 2, w /= 2, ch *= 4;
            NF_TRY(put(spec, size, &at,
                       ", %d*(actnorm2d(h=%d,w=%d,c=%d), conv1x1(h=%d,w=%d,c=%d), "
                       "coupling2d(h=%d,w=%d,c=%d,mask=channel,hidden=%d))",
                       c->steps, h, w, ch, h, w, ch, h, w, ch, c->hidden));
            if (s + 1 < c->scales) {
                NF_TRY(put(spec, size, &at, ", split(h=%d,w=%d,c=%d)", h, w, ch));
                ch /= 2;
            }
        }
        return NF_OK;
    case NF_IMAGE_REALNVP:
        for (int s = 0; s <= c->scales; s++) {
            int last = s == c->scales, ncb = last ? 4 : 3;
            for (int k = 0; k < ncb; k++)
                NF_TRY(put(spec, size, &at, "%sactnorm2d(h=%d,w=%d,c=%d), coupling2d(h=%d,w=%d,c=%d,mask=checkerboard,flip=%d,hidden=%d)",
                           SEP, h, w, ch, h, w, ch, k % 2, c->hidden));
            if (last) break;
            NF_TRY(put(spec, size, &at, ", squeeze(h=%d,w=%d,c=%d)", h, w, ch));
            h /= 2, w /= 2, ch *= 4;
            for (int k = 0; k < 3; k++)
                NF_TRY(put(spec, size, &at, ", actnorm2d(h=%d,w=%d,c=%d), coupling2d(h=%d,w=%d,c=%d,mask=channel,flip=%d,hidden=%d)",
                           h, w, ch, h, w, ch, k % 2, c->hidden));
            NF_TRY(put(spec, size, &at, ", split(h=%d,w=%d,c=%d)", h, w, ch));
            ch /= 2;
        }
        return NF_OK;
    case NF_IMAGE_TARFLOW:
        for (int k = 0; k < c->blocks; k++)
            NF_TRY(put(spec, size, &at, "%starflow(h=%d,w=%d,c=%d,patch=%d,width=%d,heads=%d,layers=%d,reverse=%d)", SEP,
                       h, w, ch, c->patch, c->width, c->heads, c->layers, k % 2));
        return NF_OK;
    }
    return nf_error(NF_EINVAL, "unknown image architecture");
}
#undef SEP

/* Decode only a region of a JPEG (wds_core._native.jpegregion): libjpeg-turbo's jpeg_skip_scanlines and
 * jpeg_crop_scanline, which neither Pillow nor simplejpeg expose.  Built by setup.py when a C compiler and
 * libjpeg-turbo's headers are there; wds decodes whole images without it.
 *
 * header(data) -> (height, width, colorspace): the frame header's size and "YCbCr", "Gray" or "other".
 *
 * decode_region(data, denom, top, bottom, left, right, out) -> (width, xoffset)
 *
 * Decodes rows [top, bottom) of the image reduced by 1/denom (1, 2, 4 or 8) as RGB, columns from xoffset
 * (left rounded down to the decoder's block column) for width pixels (at least up to right), row after row into
 * the writable buffer out, which must hold (bottom - top) * width * 3 bytes: the caller gives at least
 * (bottom - top) * scaled image width * 3.  Rows below bottom are never decoded.  The settings are those of
 * Pillow's and simplejpeg's defaults (accurate integer DCT, smooth upsampling), so the pixels are theirs.
 *
 * Any libjpeg error or warning (corrupt data, a truncated file) raises ValueError with libjpeg's message:
 * the caller decodes the whole image the usual way then, which reports it as it always did.  Only YCbCr and
 * greyscale JPEGs are taken (ValueError otherwise).  The GIL is released while decoding.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#ifndef LIBJPEG_TURBO_VERSION
#error "jpegregion needs libjpeg-turbo (jpeg_skip_scanlines, jpeg_crop_scanline); the build skips it without"
#endif

struct guard {
    struct jpeg_error_mgr base;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

static void guard_error(j_common_ptr cinfo)
{
    struct guard *g = (struct guard *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, g->message);
    longjmp(g->jump, 1);
}

static void guard_message(j_common_ptr cinfo, int level)
{
    /* level -1 is a warning (corrupt data the decoder would patch over): refused like an error */
    if (level < 0)
        guard_error(cinfo);
}

/* A decompressor whose errors and warnings jump back to setjmp(err->jump), with nothing allocated yet */
static void prepare(struct jpeg_decompress_struct *cinfo, struct guard *err)
{
    memset(cinfo, 0, sizeof(*cinfo));
    err->message[0] = '\0';
    cinfo->err = jpeg_std_error(&err->base);
    err->base.error_exit = guard_error;
    err->base.emit_message = guard_message;
}

/* Called after setjmp: starts reading data and reads its headers (an error jumps back) */
static void read_headers(struct jpeg_decompress_struct *cinfo, Py_buffer *data)
{
    jpeg_create_decompress(cinfo);
    jpeg_mem_src(cinfo, (const unsigned char *)data->buf, (unsigned long)data->len);
    jpeg_read_header(cinfo, TRUE);
}

static PyObject *decode_region(PyObject *self, PyObject *args)
{
    Py_buffer data, out;
    int denom, top, bottom, left, right;
    if (!PyArg_ParseTuple(args, "y*iiiiiw*", &data, &denom, &top, &bottom, &left, &right, &out))
        return NULL;

    struct jpeg_decompress_struct cinfo;
    struct guard err;
    const char *refused = NULL;
    JDIMENSION xoffset = 0, width = 0;
    int failed = 0;

    Py_BEGIN_ALLOW_THREADS
    prepare(&cinfo, &err);
    if (setjmp(err.jump)) {
        failed = 1;
    } else {
        read_headers(&cinfo, &data);
        if (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE) {
            refused = "not a YCbCr or greyscale JPEG";
        } else if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
            refused = "the scale must be 1/1, 1/2, 1/4 or 1/8";
        } else {
            cinfo.out_color_space = JCS_RGB;
            cinfo.scale_num = 1;
            cinfo.scale_denom = (unsigned int)denom;
            cinfo.dct_method = JDCT_ISLOW;
            cinfo.do_fancy_upsampling = TRUE;
            jpeg_calc_output_dimensions(&cinfo);
            if (top < 0 || left < 0 || bottom <= top || right <= left || (JDIMENSION)bottom > cinfo.output_height ||
                (JDIMENSION)right > cinfo.output_width) {
                refused = "the region is not inside the image";
            } else if ((size_t)(bottom - top) * (size_t)cinfo.output_width * 3 > (size_t)out.len) {
                refused = "the output buffer is too small";
            } else {
                jpeg_start_decompress(&cinfo);
                xoffset = (JDIMENSION)left;
                width = (JDIMENSION)(right - left);
                if (width < cinfo.output_width)
                    jpeg_crop_scanline(&cinfo, &xoffset, &width);
                else
                    xoffset = 0;
                if (top > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)top) != (JDIMENSION)top)
                    refused = "fewer rows than the header says";
                size_t stride = (size_t)width * 3;
                unsigned char *row = (unsigned char *)out.buf;
                while (!refused && cinfo.output_scanline < (JDIMENSION)bottom) {
                    JSAMPROW rows[1] = {row};
                    if (jpeg_read_scanlines(&cinfo, rows, 1) != 1)
                        refused = "fewer rows than the header says";
                    row += stride;
                }
            }
        }
    }
    jpeg_destroy_decompress(&cinfo); /* also aborts a decompression left part way */
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (failed) {
        PyErr_Format(PyExc_ValueError, "libjpeg: %s", err.message);
        return NULL;
    }
    if (refused) {
        PyErr_SetString(PyExc_ValueError, refused);
        return NULL;
    }
    return Py_BuildValue("(II)", (unsigned int)width, (unsigned int)xoffset);
}

static PyObject *header(PyObject *self, PyObject *args)
{
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    struct jpeg_decompress_struct cinfo;
    struct guard err;
    int failed = 0;
    prepare(&cinfo, &err);
    if (setjmp(err.jump))
        failed = 1;
    else
        read_headers(&cinfo, &data);
    const char *space = cinfo.jpeg_color_space == JCS_YCbCr       ? "YCbCr"
                        : cinfo.jpeg_color_space == JCS_GRAYSCALE ? "Gray"
                                                                  : "other";
    unsigned int height = cinfo.image_height, width = cinfo.image_width;
    jpeg_destroy_decompress(&cinfo);
    PyBuffer_Release(&data);
    if (failed) {
        PyErr_Format(PyExc_ValueError, "libjpeg: %s", err.message);
        return NULL;
    }
    return Py_BuildValue("(IIs)", height, width, space);
}

static PyMethodDef methods[] = {
    {"header", header, METH_VARARGS,
     "header(data) -> (height, width, colorspace): the JPEG's size and \"YCbCr\", \"Gray\" or \"other\"."},
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, denom, top, bottom, left, right, out) -> (width, xoffset): rows [top, bottom) of the "
     "JPEG reduced by 1/denom as RGB, columns xoffset..xoffset+width (covering [left, right)), into out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "jpegregion", "Region decoding of JPEGs by libjpeg-turbo (optional, compiled).", -1,
    methods,
};

PyMODINIT_FUNC PyInit_jpegregion(void)
{
    return PyModule_Create(&module);
}

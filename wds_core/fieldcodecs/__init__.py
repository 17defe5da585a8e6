"""Decoders and encoders by extension, and the image spec table.

* :mod:`.decoders` -- ``txt``/``cls``/``json``/``npy``/``npz``/``msgpack``/``cbor``/
  gzip/pickle (pickle only when allowed) and the handler helpers;
* :mod:`.images` -- ``"pil"``, ``"rgb8"``, ``"rgb"``... specs and image encoding;
* :mod:`.jpeg` -- JPEGs by libjpeg-turbo directly when the ``jpeg`` extra is installed;
* :mod:`.media` -- audio (soundfile) and video (PyAV) fields to arrays;
* :mod:`.encoders` -- the writer's side: every decodable extension can be written.
"""

from .decoders import (
    NULL,
    Continue,
    PickleNotAllowed,
    basic_decoders,
    basichandlers,
    gzfilter,
    handle_extension,
    register_decoder,
)
from .encoders import FieldEncoder, register_encoder
from .images import (
    IMAGE_EXTENSIONS,
    ImageHandler,
    ImageSpec,
    encode_image,
    image_spec,
    imagehandler,
    register_image_spec,
)
from .jpeg import jpeg_decoder, region_decoding, set_jpeg_decoder
from .media import AudioHandler, VideoHandler

__all__ = [
    "AudioHandler",
    "IMAGE_EXTENSIONS",
    "NULL",
    "Continue",
    "FieldEncoder",
    "ImageHandler",
    "ImageSpec",
    "PickleNotAllowed",
    "basic_decoders",
    "basichandlers",
    "encode_image",
    "gzfilter",
    "handle_extension",
    "image_spec",
    "imagehandler",
    "jpeg_decoder",
    "register_decoder",
    "register_encoder",
    "register_image_spec",
    "region_decoding",
    "set_jpeg_decoder",
    "VideoHandler",
]

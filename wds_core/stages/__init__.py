"""What a pipeline does to samples: map, select and rename fields, shuffle and batch, decode and crop,
interleaved documents, image-text pairs, caching and tracing."""

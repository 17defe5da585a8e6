"""``webdataset.pipeline``: ``DataPipeline`` (wds's: checkpointable, stages may be ``PipelineStage``s)."""

from ..pipeline.datapipeline import DataPipeline, PipelineStage

__all__ = ["DataPipeline", "PipelineStage"]

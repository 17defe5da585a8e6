"""A folder put first on ``sys.path`` by ``python -m wds_torch.run``: its ``webdataset`` package is wds."""

"""Telemetry: a sampler that wraps a step's command on either side, and parsers for its records,
BigGAN-PyTorch's logs and the seed's `sar` and `nvidia-smi` output.

The sampler's modules use the standard library only (NVML through nvidia-ml-py, imported
lazily), so it runs under any python3 from 3.8 on: the image's, a cluster's system python, the venv's.
"""

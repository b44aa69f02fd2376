"""The probe: a small real GAN on scikit-learn's digits, with BigGAN-PyTorch's three steps and log formats."""

"""Atlas: HPC AI workflows moved to cloud-native platforms as infrastructure as code."""

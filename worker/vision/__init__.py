"""Vision-language models: loading through mlx-vlm, image decoding and prompt inputs."""

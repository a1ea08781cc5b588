"""The mlxd worker process: owns one model and does all MLX work on its scheduler thread."""

"""gems backend for Iluvatar CoreX GPUs: detection, limits and tuned configs, as data."""

model tiny
param eps : float = key("{arch}.attention.layer_norm_rms_epsilon")
weight w : f32[eps] = "w.weight"

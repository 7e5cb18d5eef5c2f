"""The local sparse kernels: a rank's block of Â as CSR column tiles and its product with a dense block
(:mod:`mggcn.kernels.tiled`), and which kernel runs on which device (:mod:`mggcn.kernels.policy`)."""

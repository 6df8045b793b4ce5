//! NUMPY_10 backend.

//! The sparse local force derivatives of one entry: what aenet stores per entry with forces.

use stowage_core::{DType, Error, Result, Tensor};

/// Radial derivatives: one row per edge `(center, neighbor)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RadialDerivatives {
    /// Center atom of each edge, `(E,)`.
    pub center_idx: Vec<i64>,
    /// Neighbor atom of each edge, `(E,)`.
    pub neighbor_idx: Vec<i64>,
    /// `dG/dr_ij`, float `(E, n_radial_features, 3)`.
    pub dg_drij: Tensor,
    /// Species weight of each neighbor, float `(E,)`; `None` when the descriptor has one species.
    pub neighbor_typespin: Option<Tensor>,
}

/// Angular derivatives: one row per triplet `(center, j, k)`.
#[derive(Debug, Clone, PartialEq)]
pub struct AngularDerivatives {
    /// Center atom of each triplet, `(T,)`.
    pub center_idx: Vec<i64>,
    /// First neighbor of each triplet, `(T,)`.
    pub neighbor_j_idx: Vec<i64>,
    /// Second neighbor of each triplet, `(T,)`.
    pub neighbor_k_idx: Vec<i64>,
    /// Gradient with respect to the center, float `(T, n_angular_features, 3)`.
    pub grads_i: Tensor,
    /// Gradient with respect to neighbor j, float `(T, n_angular_features, 3)`.
    pub grads_j: Tensor,
    /// Gradient with respect to neighbor k, float `(T, n_angular_features, 3)`.
    pub grads_k: Tensor,
    /// Species weight of each triplet, float `(T,)`; `None` when the descriptor has one species.
    pub triplet_typespin: Option<Tensor>,
}

/// One entry's local derivatives.
///
/// ```
/// use stowage_core::Tensor;
/// use stowage_hdf5::{AngularDerivatives, LocalDerivatives, RadialDerivatives};
/// let zeros = |dims: &[usize]| Tensor::zeros(stowage_core::DType::F64, dims).unwrap();
/// let d = LocalDerivatives {
///     n_atoms: 2,
///     radial: RadialDerivatives {
///         center_idx: vec![0, 1],
///         neighbor_idx: vec![1, 0],
///         dg_drij: zeros(&[2, 2, 3]),
///         neighbor_typespin: None,
///     },
///     angular: AngularDerivatives {
///         center_idx: vec![],
///         neighbor_j_idx: vec![],
///         neighbor_k_idx: vec![],
///         grads_i: zeros(&[0, 1, 3]),
///         grads_j: zeros(&[0, 1, 3]),
///         grads_k: zeros(&[0, 1, 3]),
///         triplet_typespin: None,
///     },
/// };
/// assert_eq!((d.n_radial_edges(), d.n_angular_triplets()), (2, 0));
/// d.check(2, 1, false).unwrap();
/// assert!(d.check(3, 1, false).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct LocalDerivatives {
    /// Atoms in the entry.
    pub n_atoms: usize,
    /// Radial part.
    pub radial: RadialDerivatives,
    /// Angular part.
    pub angular: AngularDerivatives,
}

impl LocalDerivatives {
    /// The 11 arrays by aenet's node name, in [`crate::layout::DERIVATIVE_ARRAYS`] order: the
    /// index arrays as int64 `(n,)` tensors, typespin `None` when the descriptor has one species
    /// (aenet stores none then).
    ///
    /// ```
    /// # use stowage_core::{DType, Tensor};
    /// # use stowage_hdf5::{AngularDerivatives, LocalDerivatives, RadialDerivatives};
    /// # let zeros = |dims: &[usize]| Tensor::zeros(DType::F64, dims).unwrap();
    /// # let d = LocalDerivatives {
    /// #     n_atoms: 2,
    /// #     radial: RadialDerivatives { center_idx: vec![0, 1], neighbor_idx: vec![1, 0],
    /// #         dg_drij: zeros(&[2, 2, 3]), neighbor_typespin: None },
    /// #     angular: AngularDerivatives { center_idx: vec![], neighbor_j_idx: vec![],
    /// #         neighbor_k_idx: vec![], grads_i: zeros(&[0, 1, 3]), grads_j: zeros(&[0, 1, 3]),
    /// #         grads_k: zeros(&[0, 1, 3]), triplet_typespin: None },
    /// # };
    /// let arrays = d.named_arrays();
    /// assert_eq!(arrays[0].0, "radial/center_idx");
    /// assert_eq!(arrays[0].1.as_ref().unwrap().to_vec::<i64>()?, [0, 1]);
    /// assert!(arrays[3].1.is_none(), "one species: no typespin");
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn named_arrays(&self) -> [(&'static str, Option<Tensor>); 11] {
        let ints = |v: &[i64]| Some(Tensor::from_slice(&[v.len()], v).expect("1-D of its length"));
        let (r, a) = (&self.radial, &self.angular);
        let arrays = [
            ints(&r.center_idx),
            ints(&r.neighbor_idx),
            Some(r.dg_drij.clone()),
            r.neighbor_typespin.clone(),
            ints(&a.center_idx),
            ints(&a.neighbor_j_idx),
            ints(&a.neighbor_k_idx),
            Some(a.grads_i.clone()),
            Some(a.grads_j.clone()),
            Some(a.grads_k.clone()),
            a.triplet_typespin.clone(),
        ];
        let mut names = crate::layout::DERIVATIVE_ARRAYS.into_iter();
        arrays.map(|array| (names.next().expect("11 names"), array))
    }

    /// Radial edges `E`.
    pub fn n_radial_edges(&self) -> usize {
        self.radial.center_idx.len()
    }

    /// Angular triplets `T`.
    pub fn n_angular_triplets(&self) -> usize {
        self.angular.center_idx.len()
    }

    /// Checks every array's shape against `E`, `T` and the descriptor's feature counts, float
    /// arrays being float32 or float64 and typespin present exactly when `multi`. The error names
    /// the array and both sides.
    pub fn check(&self, n_radial: usize, n_angular: usize, multi: bool) -> Result<()> {
        let (e, t) = (self.n_radial_edges(), self.n_angular_triplets());
        let index_lengths = [
            ("radial/neighbor_idx", self.radial.neighbor_idx.len(), e),
            ("angular/neighbor_j_idx", self.angular.neighbor_j_idx.len(), t),
            ("angular/neighbor_k_idx", self.angular.neighbor_k_idx.len(), t),
        ];
        for (name, got, want) in index_lengths {
            if got != want {
                return Err(Error::invalid(format!("{name} has {got} elements, expected {want}")));
            }
        }
        let floats = [
            ("radial/dG_drij", Some(&self.radial.dg_drij), vec![e, n_radial, 3]),
            ("angular/grads_i", Some(&self.angular.grads_i), vec![t, n_angular, 3]),
            ("angular/grads_j", Some(&self.angular.grads_j), vec![t, n_angular, 3]),
            ("angular/grads_k", Some(&self.angular.grads_k), vec![t, n_angular, 3]),
            ("radial/neighbor_typespin", self.radial.neighbor_typespin.as_ref(), vec![e]),
            ("angular/triplet_typespin", self.angular.triplet_typespin.as_ref(), vec![t]),
        ];
        for (name, tensor, want) in floats {
            let is_typespin = name.ends_with("typespin");
            match tensor {
                None if is_typespin && !multi => {}
                None => return Err(Error::invalid(format!("{name} is missing (multi: {multi})"))),
                Some(_) if is_typespin && !multi => {
                    return Err(Error::invalid(format!(
                        "{name} is given but the descriptor has one species (multi false)"
                    )));
                }
                Some(tensor) => {
                    if !matches!(tensor.dtype(), DType::F32 | DType::F64) {
                        return Err(Error::invalid(format!(
                            "{name} is {}, expected float32 or float64",
                            tensor.dtype()
                        )));
                    }
                    if tensor.shape() != want.as_slice() {
                        return Err(Error::invalid(format!(
                            "{name} has shape {:?}, expected {want:?}",
                            tensor.shape()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

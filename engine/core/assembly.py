"""Sparse assembly of per-element blocks into one matrix with a fixed sparsity pattern, and a sparse
matrix's rows as equal-width arrays."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def dofs3(idx):
    """Node indices [E,k] -> coordinate indices [E,3k] (x,y,z interleaved)."""
    return (3 * idx[:, :, None] + np.arange(3)).reshape(len(idx), -1)


class SparseAssembler:
    """Adds per-element dense blocks [E,k,k] over coordinate indices `elem_dofs` [E,k] into
    one CSR matrix; the pattern and each entry's slot are computed once."""

    def __init__(self, elem_dofs, n):
        k = elem_dofs.shape[1]
        rows = np.repeat(elem_dofs, k, axis=1).ravel()
        cols = np.tile(elem_dofs, (1, k)).ravel()
        order = np.lexsort((cols, rows))
        sorted_rows, sorted_cols = rows[order], cols[order]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = (sorted_rows[1:] != sorted_rows[:-1]) | (sorted_cols[1:] != sorted_cols[:-1])
        slot_sorted = np.cumsum(first) - 1
        self.slot = np.empty(len(rows), dtype=np.int64)
        self.slot[order] = slot_sorted
        self.nnz = int(slot_sorted[-1]) + 1
        r, c = sorted_rows[first], sorted_cols[first]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n))])
        self.indices, self.indptr, self.n = c, indptr, n

    def assemble(self, blocks):
        data = np.bincount(self.slot, weights=blocks.ravel(), minlength=self.nnz)
        return sp.csr_matrix((data, self.indices, self.indptr), shape=(self.n, self.n))


def padded_rows(matrix):
    """A CSR matrix's rows as arrays of equal width w, the longest row's: ([R,w] column indices,
    [R,w] values, [R,w] which entries are the row's own), each row padded with its first column
    (0 for an empty row) at value zero."""
    counts = np.diff(matrix.indptr)
    width = max(int(counts.max(initial=0)), 1)
    row = np.repeat(np.arange(matrix.shape[0]), counts)
    place = np.arange(matrix.nnz) - np.repeat(matrix.indptr[:-1], counts)
    own = np.zeros((matrix.shape[0], width), dtype=bool)
    own[row, place] = True
    columns = np.zeros((matrix.shape[0], width), dtype=np.int64)
    columns[row, place] = matrix.indices
    columns[~own] = np.broadcast_to(columns[:, :1], columns.shape)[~own]
    values = np.zeros((matrix.shape[0], width))
    values[row, place] = matrix.data
    return columns, values, own

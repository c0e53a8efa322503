//! The book's contract types: the vocabulary every layer speaks.

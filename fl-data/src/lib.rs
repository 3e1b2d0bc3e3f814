//! `fl-data`: datasets for the simulator. Readers of the official file formats (MNIST and
//! Fashion-MNIST IDX, CIFAR-10/100 binary, Tiny-ImageNet JPEGs, ImageNet JPEG folders, AG News
//! CSV, IMDb text files),
//! their conversion into normalised device tensors or token-id sequences (torchtext's `basic_english` tokenizer and a frequency-ordered
//! vocabulary), FedProx's synthetic data, the partitioners that split a training set among
//! clients, and the fetchers and `info` behind `fl data fetch` / `fl data info`.
//!
//! Tiny-ImageNet's and ImageNet's JPEGs and IMDb's review files are decoded once into caches
//! beside the data ([`cache`]).
//!
//! Registered components: datasets `mnist`, `fashion-mnist`, `cifar10`, `cifar100`,
//! `tiny-imagenet`, `imagenet`, `agnews`, `imdb`, `synthetic`; partitioners `iid`, `dirichlet`, `shards`. A
//! binary must reference this crate (`use fl_data as _;`) for the registrations to survive
//! linking.

pub mod agnews;
pub mod cache;
pub mod catalog;
pub mod cifar;
pub mod csv;
pub mod datasets;
pub mod error;
pub mod fetch;
pub mod idx;
pub mod imagenet;
pub mod imdb;
pub mod info;
pub mod integrity;
pub mod jpeg_listing;
pub mod mnist;
pub mod partition;
pub mod raw;
pub mod synthetic;
pub mod text;
pub mod tiny_imagenet;

pub use agnews::{AgNewsConfig, AgNewsSplits, Articles, read_agnews};
pub use cache::CacheUse;
pub use catalog::{DATASET_NAMES, ImageDataset};
pub use cifar::Cifar100Labels;
pub use datasets::{Cifar100Config, ImageDatasetConfig, NormalizationChoice, load_image_dataset};
pub use error::{DataError, PartitionError, Result};
pub use fetch::{FetchOutcome, fetch, fetch_agnews, fetch_agnews_from, fetch_cifar, fetch_fashion_mnist, fetch_mnist};
pub use imagenet::{ImageNet, ImageNetConfig, read_imagenet_cached};
pub use imdb::{ImdbConfig, ImdbEncoded, load_imdb_ids, read_imdb};
pub use info::{DataState, DatasetInfo, info};
pub use partition::{Cap, Dirichlet, DirichletConfig, Iid, Remainder, Shards, ShardsConfig};
pub use raw::{Normalization, RawImages, RawSplits};
pub use synthetic::SyntheticConfig;
pub use text::{Specials, TokenIds, Vocab, VocabScope, basic_english};
pub use tiny_imagenet::{TinyImageNet, read_tiny_imagenet, read_tiny_imagenet_cached};

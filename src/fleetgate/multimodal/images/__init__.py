"""Images: fetch safely, decode with bomb limits, resize, cache and budget."""

from fleetgate.multimodal.images.affinity import ImageAffinity
from fleetgate.multimodal.images.budget import ImageComputeBudget
from fleetgate.multimodal.images.cache import ProcessedImageCache
from fleetgate.multimodal.images.fetch import FetchPolicy, ImageFetcher
from fleetgate.multimodal.images.isolated import IsolatedImageProcessor
from fleetgate.multimodal.images.netguard import AddressPolicy
from fleetgate.multimodal.images.pipeline import ImagePipeline, LoadedImage
from fleetgate.multimodal.images.process import ImageProcessor, ProcessedImage, ProcessingParams
from fleetgate.multimodal.images.tokens import ModelFamily, estimate_image_tokens

__all__ = [
    "AddressPolicy",
    "FetchPolicy",
    "ImageAffinity",
    "ImageComputeBudget",
    "ImageFetcher",
    "ImagePipeline",
    "ImageProcessor",
    "IsolatedImageProcessor",
    "LoadedImage",
    "ModelFamily",
    "ProcessedImage",
    "ProcessedImageCache",
    "ProcessingParams",
    "estimate_image_tokens",
]

"""The one home of the op-name lists that mxmixed's graph passes share: the casts MXNet's AMP pass
inserts, the Module API's loss outputs, the BatchNorm ops and the detection ops a conversion
keeps float32. No MXNet import: these are names, as a ``-symbol.json`` spells them."""

__all__ = ["CAST_OPS", "LOSS_OUTPUT_OPS", "BATCHNORM_OPS", "DETECTION_OPS"]

# The casts that MXNet's AMP pass inserts.
CAST_OPS = ("amp_cast", "amp_multicast")
# Loss-output ops of the Module API: their label input is unused at inference, where each is
# its plain activation; their grad_scale multiplies the head gradient in training.
LOSS_OUTPUT_OPS = ("SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput",
                   "MAERegressionOutput", "SVMOutput", "MakeLoss")
# Ops whose inputs 1..4 are gamma, beta, moving mean and moving variance: float32 always
# (cuDNN and MXNet's type inference require it for float16 data; MXNet issue #17164).
BATCHNORM_OPS = ("BatchNorm", "BatchNorm_v1", "_contrib_SyncBatchNorm", "CuDNNBatchNorm")
# Detection ops that a conversion keeps float32 by default. Box coordinates need float32:
# float16 has a step of 0.25 pixel at 512 and of 0.5 at 1024, and NMS, IoU and matching
# compare coordinates and scores. Several are in none of MXNet's AMP lists, so its pass leaves
# their float16 and float32 inputs unmatched.
DETECTION_OPS = (
    "_contrib_box_decode",            # SSD / Faster R-CNN: in no AMP list; anchors float32
    "_contrib_box_encode",            # training targets; in no AMP list
    "_contrib_box_nms",               # NMS on scores and coordinates (AMP: widest type)
    "_contrib_box_non_maximum_suppression",
    "_contrib_box_iou",
    "_contrib_bipartite_matching",
    "_contrib_MultiBoxPrior",         # anchors (AMP: float32 list)
    "_contrib_MultiBoxTarget",
    "_contrib_MultiBoxDetection",
    "_contrib_Proposal",              # Faster R-CNN region proposals
    "_contrib_MultiProposal",
    "ROIPooling",                     # ROI ops: box coordinates as inputs
    "_contrib_ROIAlign",
    "_contrib_RROIAlign",
    "_contrib_PSROIPooling",
    "_contrib_DeformablePSROIPooling",
)
